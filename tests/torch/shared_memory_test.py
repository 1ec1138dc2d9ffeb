"""The "weft" backend's CPU allocator: large tensors made after init_process_group("weft") live in
Weft's shared host memory, so that all-reduces of them (DDP's buckets) read the peers' tensors
directly. Run one process per rank with weftrun:

    weftrun -n 2 python3 tests/torch/shared_memory_test.py [--rank1-off]

--rank1-off: rank 1 turns the allocator off (WEFT_TORCH_SHARED_MEMORY=0), so the ranks disagree
and every all-reduce must take the copying path, with the same results.
Exit status 0 when everything held."""

import argparse
import os
import sys
import tempfile

LOG_DIR = tempfile.mkdtemp(prefix="weft-shared-memory-test-")
# Before Weft logs anything: the path each rank's all-reduces took is read from its own log.
os.environ["WEFT_DEBUG"] = "INFO"
os.environ["WEFT_DEBUG_FILE"] = os.path.join(LOG_DIR, "rank-%p.log")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

import weft_torch  # noqa: E402  (registers the backend)

DIRECT = "read the peers' buffers directly"
COPYING = "took the copying path"
LARGE = 1 << 20  # floats: 4 MiB, well above shared_min_bytes


def check(cond, what):
    if not cond:
        raise AssertionError(f"rank {dist.get_rank()}: {what}")


def mapping_of(tensor):
    """The file /proc/self/maps names for the tensor's first byte ('' for anonymous memory)."""
    at = tensor.data_ptr()
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            start, end = (int(x, 16) for x in fields[0].split("-"))
            if start <= at < end:
                return fields[5].strip() if len(fields) > 5 else ""
    raise AssertionError(f"{at:#x} is in no mapping")


def shared(tensor):
    return "memfd:weft-host-memory" in mapping_of(tensor)


def own_log():
    dist.barrier()  # every rank's calls so far have logged
    path = os.path.join(LOG_DIR, f"rank-{os.getpid()}.log")
    with open(path) as f:
        return f.read()


def allocations_and_reuse():
    stats = weft_torch.shared_memory_stats()
    check(stats["installed"], f"the allocator is not installed: {stats}")
    big = torch.empty(LARGE)
    check(shared(big), f"a 4 MiB tensor is in {mapping_of(big)!r}, not shared memory")
    small = torch.empty(weft_torch.shared_min_bytes // 4 - 1)
    check(not shared(small), "a tensor below shared_min_bytes is in shared memory")
    # numpy and torch views see the same memory, and it stays where it is.
    big.fill_(3.0)
    view = big.numpy()
    view[7] = 9.0
    check(big[7].item() == 9.0 and big[6].item() == 3.0, "numpy's view is not the tensor's memory")
    # A freed block serves the next tensor of about its size.
    at = big.data_ptr()
    del view, big
    before = weft_torch.shared_memory_stats()
    again = torch.empty(LARGE - 100)
    after = weft_torch.shared_memory_stats()
    check(again.data_ptr() == at, "a freed block was not reused")
    check(after["reused"] == before["reused"] + 1, f"reuse not counted: {before} -> {after}")
    check(after["cached_blocks"] == before["cached_blocks"] - 1, f"kept blocks: {before} -> {after}")
    # Tensors of every size still work as tensors.
    for n in (0, 1, 65536, 65537, 3 * LARGE + 5):
        t = torch.arange(n, dtype=torch.float64)
        check(t.sum().item() == n * (n - 1) / 2, f"arange({n}) sums wrong")


def forked_children_write_their_own_copy():
    rank = dist.get_rank()
    kept = torch.full((LARGE,), float(rank + 1))
    freed = torch.empty(LARGE)
    del freed  # now a kept block: after the fork the parent may reuse it, the child must not
    child_wait, parent_done = os.pipe()  # read end, write end

    def child():
        os.read(child_wait, 1)  # the parent has taken the kept block and written it
        kept.fill_(-1.0)
        reused = torch.full((LARGE,), -2.0)
        return bool((kept == -1.0).all()) and bool((reused == -2.0).all())

    pid = os.fork()
    if pid == 0:
        try:
            os._exit(0 if child() else 1)
        except BaseException:  # noqa: BLE001  (the child must never return into the test)
            os._exit(2)
    mine = torch.full((LARGE,), 5.0)  # the kept block, which the child's copy must not be given
    os.write(parent_done, b"x")
    status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    os.close(parent_done)
    os.close(child_wait)
    check(status == 0, f"the forked child failed (status {status})")
    check(bool((kept == rank + 1).all()), "a forked child's write reached its parent's tensor")
    check(bool((mine == 5.0).all()), "a forked child's new tensor overwrote its parent's, in the block both took")

    # DataLoader workers (forked) read a dataset held in shared memory.
    data = torch.arange(4 * LARGE, dtype=torch.float32).reshape(64, -1)
    check(shared(data), "the dataset tensor is not in shared memory")
    loader = DataLoader(TensorDataset(data), batch_size=16, num_workers=2)
    total = sum(batch.double().sum().item() for (batch,) in loader)
    want = data.double().sum().item()
    check(total == want, f"DataLoader workers read {total}, not {want}")


def all_reduces(expect_direct):
    rank, n = dist.get_rank(), dist.get_world_size()
    mine_shared = weft_torch.shared_memory_stats()["installed"]
    for count in (LARGE, LARGE + 12345):
        t = torch.arange(count, dtype=torch.float32) + rank
        check(shared(t) == mine_shared, f"the tensor is in {mapping_of(t)!r}")
        dist.all_reduce(t)
        want = n * torch.arange(count, dtype=torch.float32) + n * (n - 1) / 2
        check(torch.equal(t, want), f"all_reduce of {count} floats: {t[:4]} ...")
    log = own_log()
    if expect_direct:
        check(DIRECT in log and COPYING not in log, f"the all-reduces did not read the peers' tensors:\n{log}")
    else:
        check(COPYING in log and DIRECT not in log, f"the ranks disagree, yet:\n{log}")


def ddp_buckets_are_shared():
    """DDP's buckets, made after init, are in shared memory, and its gradients are every rank's mean."""
    rank, n = dist.get_rank(), dist.get_world_size()

    def make():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 8))

    net = DDP(make())
    bucket_memory = []

    def all_reduce_hook(_state, bucket):
        buffer = bucket.buffer()
        bucket_memory.append((buffer.numel() * buffer.element_size(), shared(buffer)))
        work = dist.all_reduce(buffer.div_(n), async_op=True)
        return work.get_future().then(lambda f: f.value()[0])

    net.register_comm_hook(None, all_reduce_hook)
    net(torch.full((4, 512), float(rank + 1))).sum().backward()
    large = [is_shared for nbytes, is_shared in bucket_memory if nbytes >= weft_torch.shared_min_bytes]
    check(large and all(large), f"DDP's buckets (bytes, shared): {bucket_memory}")
    local = make()
    for r in range(n):
        local(torch.full((4, 512), float(r + 1))).sum().backward()
    for got, p in zip(net.parameters(), local.parameters()):
        check(torch.allclose(got.grad, p.grad / n, rtol=1e-5, atol=1e-5), "DDP's averaged gradient differs")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rank1-off", action="store_true")
    args = parser.parse_args()
    if args.rank1_off and os.environ.get("RANK") == "1":
        os.environ["WEFT_TORCH_SHARED_MEMORY"] = "0"
    dist.init_process_group("weft")
    if args.rank1_off:
        rank = dist.get_rank()
        stats = weft_torch.shared_memory_stats()
        check(stats["installed"] == (rank != 1), f"installed on rank {rank}: {stats}")
        all_reduces(expect_direct=False)
    else:
        allocations_and_reuse()
        forked_children_write_their_own_copy()
        all_reduces(expect_direct=True)
        ddp_buckets_are_shared()
    if dist.get_rank() == 0:
        print("shared memory test: passed")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
