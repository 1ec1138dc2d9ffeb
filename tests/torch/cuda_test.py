"""The "weft" backend on CUDA tensors: every operation on the GPU against the same operation on the
CPU through the same backend, with several ranks sharing the GPUs there are (local rank modulo
GPUs). Run one process per rank with weftrun:  weftrun -n 2 python3 tests/torch/cuda_test.py
Needs weft_torch built against a torch with CUDA (python/setup.py) and a GPU; without them it
prints why and exits 0 having checked nothing (tools/gpu-check runs it on a GPU machine)."""

import datetime
import os
import sys

import torch
import torch.distributed as dist

import weft_torch


def check(cond, what):
    if not cond:
        raise AssertionError(f"rank {dist.get_rank()}: {what}")


def main():
    if not weft_torch.cuda_tensors or not torch.cuda.is_available():
        why = "weft_torch was built without CUDA tensors" if not weft_torch.cuda_tensors else "no GPU"
        print(f"cuda_test: SKIPPED ({why}): nothing checked")
        return 0
    local = int(os.environ.get("LOCAL_RANK", os.environ.get("RANK", "0")))
    torch.cuda.set_device(local % torch.cuda.device_count())
    dist.init_process_group("weft", timeout=datetime.timedelta(seconds=120))
    rank, n = dist.get_rank(), dist.get_world_size()
    gpu = torch.device("cuda", torch.cuda.current_device())
    torch.manual_seed(99 + rank)
    base = torch.randint(-20, 20, (n * 1000 + 3,)).float()

    def same(cpu_fn, what):
        """cpu_fn(device) runs one operation on tensors made on `device` and returns its result."""
        want = cpu_fn(torch.device("cpu"))
        got = cpu_fn(gpu)
        check(torch.equal(want, got.cpu()), f"{what}: the GPU result differs from the CPU one")

    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.float64):
        for op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.MIN, dist.ReduceOp.PRODUCT):
            def run(dev, op=op, dtype=dtype):
                # Factors 1 and 2 only: a product of n of them is exact in every type.
                t = (base[:257] % (2 if op == dist.ReduceOp.PRODUCT else 3) + 1).to(dev, dtype)
                dist.all_reduce(t, op=op)
                return t
            same(run, f"all_reduce {op} {dtype}")

    # Every run gets a copy of base: .to() of a tensor already on the device is the tensor itself.
    def avg(dev):
        t = base.clone().to(dev)
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        return t
    want = avg(torch.device("cpu"))
    check(torch.allclose(want, avg(gpu).cpu()), "all_reduce AVG")

    def premul(dev):
        t = base.clone().to(dev)
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(torch.tensor(0.5, device=dev)))
        return t
    same(premul, "all_reduce PREMUL_SUM with a tensor factor")

    def noncontiguous(dev):
        t = base[: 4 * 6].clone().reshape(4, 6).t().to(dev)
        dist.all_reduce(t)
        return t
    same(noncontiguous, "non-contiguous all_reduce")

    def broadcast(dev):
        t = base.clone().to(dev)
        dist.broadcast(t, src=n - 1)
        return t
    same(broadcast, "broadcast")

    def reduce(dev):
        t = base.clone().to(dev)
        dist.reduce(t, dst=0)
        return t if rank == 0 else torch.zeros(1, device=dev)
    same(reduce, "reduce")

    def all_gather(dev):
        out = [torch.zeros(9, device=dev) for _ in range(n)]
        dist.all_gather(out, base[:9].to(dev))
        return torch.cat(out)
    same(all_gather, "all_gather")

    def all_gather_base(dev):
        out = torch.zeros(9 * n, device=dev)
        dist.all_gather_into_tensor(out, base[:9].to(dev))
        return out
    same(all_gather_base, "all_gather_into_tensor")

    def reduce_scatter(dev):
        out = torch.zeros(5, device=dev)
        dist.reduce_scatter_tensor(out, base[: 5 * n].to(dev))
        return out
    same(reduce_scatter, "reduce_scatter_tensor")

    def all_to_all(dev):
        out = torch.zeros(4 * n, device=dev)
        dist.all_to_all_single(out, base[: 4 * n].to(dev))
        return out
    same(all_to_all, "all_to_all_single")

    def send_recv(dev):
        t = base[:11].to(dev)
        peer = (rank + 1) % n
        got = torch.zeros(11, device=dev)
        ops = [dist.P2POp(dist.isend, t, peer), dist.P2POp(dist.irecv, got, (rank - 1) % n)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        return got
    if n > 1:
        same(send_recv, "batch_isend_irecv")

    # Asynchronous: the Work's future carries the GPU tensor, done once the GPU has finished.
    t = torch.ones(1 << 20, device=gpu)
    work = dist.all_reduce(t, async_op=True)
    value = work.get_future().wait()
    check(value[0].is_cuda and torch.all(value[0] == n).item(), "future value")
    work.wait()
    check(work.is_completed(), "work state")

    # Back to back on a stream of the caller's own: the collective waits for what was queued there.
    s = torch.cuda.Stream()
    t = torch.full((1 << 20,), float(rank + 1), device=gpu)
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        torch.cuda._sleep(100_000_000)  # the stream is busy for a while before t changes
        t.mul_(2)
        dist.all_reduce(t)
        check(torch.all(t == n * (n + 1)).item(), "all_reduce after work on a side stream")

    # A CPU tensor and a GPU tensor in one call are refused.
    try:
        dist.all_gather_into_tensor(torch.zeros(2 * n), torch.ones(2, device=gpu))
        check(False, "mixed devices accepted")
    except (RuntimeError, ValueError) as e:
        check("device" in str(e), f"mixed devices: error text {e}")

    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank}: weft backend on CUDA tensors ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
