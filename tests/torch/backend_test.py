"""Every operation of the "weft" torch.distributed backend, checked against values computed here.
Run one process per rank with weftrun (env://):  weftrun -n 3 python3 tests/torch/backend_test.py
Exit status 0 when everything matched."""

import datetime
import inspect
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist

import weft_torch  # noqa: F401  (registers the backend)


def stderr_of(call):
    """What call() wrote to file descriptor 2 (C++ warnings go there, not to Python's warnings)."""
    with tempfile.TemporaryFile() as f:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(f.fileno(), 2)
        try:
            call()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        f.seek(0)
        return f.read().decode(errors="replace")


def check(cond, what):
    if not cond:
        raise AssertionError(f"rank {dist.get_rank()}: {what}")


def compare_with_gloo(rank, n):
    """Every operation once through the weft default group and once through a gloo group over
    the same ranks, with the same inputs: the outputs must agree."""
    gloo = dist.new_group(backend="gloo")
    torch.manual_seed(1234 + rank)
    base = torch.randint(-50, 50, (n * 6,), dtype=torch.int64).float()

    def both(fn):
        out = [fn(None), fn(gloo)]
        return out

    def run_all_reduce(group, op):
        t = base.clone()
        dist.all_reduce(t, op=op, group=group)
        return t

    for op in (dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX):
        a, b = both(lambda g: run_all_reduce(g, op))
        check(torch.equal(a, b), f"all_reduce {op} differs from gloo")

    def run_broadcast(group):
        t = base.clone()
        dist.broadcast(t, src=n - 1, group=group)
        return t

    def run_reduce(group):
        t = base.clone()
        dist.reduce(t, dst=0, group=group)
        return t if rank == 0 else torch.zeros(1)

    def run_all_gather(group):
        out = [torch.zeros(6) for _ in range(n)]
        dist.all_gather(out, base[:6].clone(), group=group)
        return torch.cat(out)

    def run_gather(group):
        out = [torch.zeros(6) for _ in range(n)] if rank == 0 else None
        dist.gather(base[:6].clone(), gather_list=out, dst=0, group=group)
        return torch.cat(out) if rank == 0 else torch.zeros(1)

    def run_scatter(group):
        out = torch.zeros(6)
        dist.scatter(out, scatter_list=list(base.split(6)) if rank == 0 else None, src=0, group=group)
        return out

    def run_reduce_scatter(group):
        if group is gloo:  # gloo has no reduce_scatter: its all_reduce, sliced, is the reference
            t = base.clone()
            dist.all_reduce(t, group=gloo)
            return t.split(6)[rank].clone()
        out = torch.zeros(6)
        dist.reduce_scatter(out, list(base.clone().split(6)), group=group)
        return out

    def run_all_to_all(group):
        out = torch.zeros(n * 6)
        dist.all_to_all_single(out, base.clone(), group=group)
        return out

    def run_send_recv(group):
        got = torch.zeros(6)
        reqs = [dist.isend(base[:6].clone(), (rank + 1) % n, group=group),
                dist.irecv(got, (rank - 1) % n, group=group)]
        for r in reqs:
            r.wait()
        return got

    for name, fn in (("broadcast", run_broadcast), ("reduce", run_reduce), ("all_gather", run_all_gather),
                     ("gather", run_gather), ("scatter", run_scatter), ("reduce_scatter", run_reduce_scatter),
                     ("all_to_all_single", run_all_to_all), ("send/recv", run_send_recv)):
        if name == "send/recv" and n == 1:
            continue
        a, b = both(fn)
        check(torch.equal(a, b), f"{name} differs from gloo: {a} vs {b}")


def main():
    dist.init_process_group("weft", timeout=datetime.timedelta(seconds=60))
    rank, n = dist.get_rank(), dist.get_world_size()
    check(dist.get_backend() == "weft", f"backend {dist.get_backend()}")
    ranks_sum = n * (n - 1) / 2

    # all_reduce: every op, several dtypes, a non-contiguous tensor, async with a future.
    for dtype in (torch.float32, torch.float64, torch.int32, torch.int64, torch.bfloat16, torch.float16):
        t = torch.full((5, 3), rank + 1, dtype=dtype)
        dist.all_reduce(t)
        check(torch.all(t == n * (n + 1) // 2), f"sum {dtype}: {t}")
        for op, want in ((dist.ReduceOp.MAX, n), (dist.ReduceOp.MIN, 1), (dist.ReduceOp.PRODUCT, 1)):
            t = torch.full((4,), rank + 1 if op != dist.ReduceOp.PRODUCT else 1, dtype=dtype)
            dist.all_reduce(t, op=op)
            check(torch.all(t == want), f"{op} {dtype}: {t}")
    t = torch.full((6,), float(rank), dtype=torch.float32)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    check(torch.allclose(t, torch.full((6,), ranks_sum / n)), f"avg: {t}")
    t = torch.full((6,), 2.0)
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
    check(torch.allclose(t, torch.full((6,), float(n))), f"premul_sum: {t}")
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4).t()  # not contiguous
    dist.all_reduce(t)
    check(torch.equal(t, n * torch.arange(12, dtype=torch.float32).reshape(3, 4).t()), "non-contiguous all_reduce")
    # Non-contiguous views of tensors that require grad, as gloo takes them: the result is copied
    # back outside autograd.
    leaf = torch.ones(6, requires_grad=True)
    dist.all_reduce(leaf[::2])
    check(torch.equal(leaf.detach(), torch.tensor([n, 1.0] * 3)), f"all_reduce of a view of a leaf: {leaf}")
    param = torch.nn.Parameter(torch.full((4, 2), float(rank)))
    dist.broadcast(param.t(), src=0)
    check(torch.all(param.detach() == 0), f"broadcast of a transposed Parameter: {param}")
    t = torch.ones(1000)
    work = dist.all_reduce(t, async_op=True)
    value = work.get_future().wait()
    check(isinstance(value, list) and torch.all(value[0] == n), f"future value {value}")
    work.wait()
    check(work.is_completed() and work.is_success(), "work state")
    work = dist.all_reduce(torch.ones(8), async_op=True)
    work.wait()
    check(work.get_future().done() and torch.all(work.get_future().value()[0] == n), "future done after wait()")
    # A callback that runs another collective (as a DDP comm hook may) and waits for it.
    inner = torch.ones(4)
    chained = dist.all_reduce(torch.ones(4), async_op=True).get_future().then(
        lambda f: (dist.all_reduce(inner), f.value()[0] + inner)[1])
    check(torch.all(chained.wait() == 2 * n), f"a collective inside a future's callback: {chained.value()}")
    ts = [torch.full((3,), float(rank)), torch.full((5,), 1.0)]
    dist.all_reduce_coalesced(ts)
    check(torch.all(ts[0] == ranks_sum) and torch.all(ts[1] == n), "all_reduce_coalesced")

    # broadcast, reduce.
    t = torch.full((7,), float(rank))
    dist.broadcast(t, src=n - 1)
    check(torch.all(t == n - 1), f"broadcast {t}")
    t = torch.full((7,), float(rank))
    dist.reduce(t, dst=0)
    if rank == 0:
        check(torch.all(t == ranks_sum), f"reduce {t}")

    # all_gather (list and into one tensor), gather, scatter.
    out = [torch.zeros(2, 2) for _ in range(n)]
    dist.all_gather(out, torch.full((2, 2), float(rank)))
    check(all(torch.all(o == i) for i, o in enumerate(out)), "all_gather")
    flat = torch.zeros(n * 3)
    dist._all_gather_base(flat, torch.full((3,), float(rank)))
    check(torch.equal(flat, torch.arange(n).float().repeat_interleave(3)), f"_all_gather_base {flat}")
    gathered = [torch.zeros(4) for _ in range(n)] if rank == 1 % n else None
    dist.gather(torch.full((4,), float(rank)), gather_list=gathered, dst=1 % n)
    if rank == 1 % n:
        check(all(torch.all(g == i) for i, g in enumerate(gathered)), "gather")
    got = torch.zeros(5)
    pieces = [torch.full((5,), float(i * 10)) for i in range(n)] if rank == 0 else None
    dist.scatter(got, scatter_list=pieces, src=0)
    check(torch.all(got == rank * 10), f"scatter {got}")

    # reduce_scatter (list and one tensor).
    out = torch.zeros(3)
    dist.reduce_scatter(out, [torch.full((3,), float(rank + i)) for i in range(n)])
    check(torch.all(out == ranks_sum + n * rank), f"reduce_scatter {out}")
    out = torch.zeros(2)
    dist._reduce_scatter_base(out, torch.arange(2 * n, dtype=torch.float32))
    check(torch.equal(out, n * torch.arange(2 * rank, 2 * rank + 2, dtype=torch.float32)), f"_reduce_scatter_base {out}")

    # all_to_all_single, even and with splits; all_to_all.
    inp = torch.arange(n * 2, dtype=torch.float32) + 100 * rank
    out = torch.zeros(n * 2)
    dist.all_to_all_single(out, inp)
    want = torch.cat([torch.arange(2 * rank, 2 * rank + 2, dtype=torch.float32) + 100 * p for p in range(n)])
    check(torch.equal(out, want), f"all_to_all_single {out}")
    in_splits = [p + 1 for p in range(n)]            # rank sends p+1 rows to p
    out_splits = [rank + 1] * n                       # and receives rank+1 rows from each
    inp = torch.full((sum(in_splits), 2), float(rank))
    out = torch.zeros(sum(out_splits), 2)
    dist.all_to_all_single(out, inp, out_splits, in_splits)
    want = torch.cat([torch.full((rank + 1, 2), float(p)) for p in range(n)])
    check(torch.equal(out, want), f"all_to_all_single with splits {out}")
    # A 0-d tensor is one row: it goes to the next rank, and the previous rank's comes in.
    nxt, prv = (rank + 1) % n, (rank - 1) % n
    out = torch.tensor(0.0)
    dist.all_to_all_single(out, torch.tensor(rank + 5.0), [int(p == prv) for p in range(n)],
                           [int(p == nxt) for p in range(n)])
    check(out.item() == prv + 5, f"all_to_all_single of 0-d tensors with splits: {out}")
    outs = [torch.zeros(p + 1) for p in range(n)]
    dist.all_to_all(outs, [torch.full((rank + 1,), float(rank * 10 + p)) for p in range(n)])
    check(all(torch.all(o == p * 10 + rank) for p, o in enumerate(outs)), "all_to_all")

    # send / recv around the ring, nonblocking; barrier.
    if n > 1:
        got = torch.zeros(8)
        reqs = [dist.isend(torch.full((8,), float(rank)), nxt), dist.irecv(got, prv)]
        for r in reqs:
            r.wait()
        check(torch.all(got == prv), f"send/recv {got}")
        # Every rank sends first, 4 MiB each way (past what the shared-memory ring holds): the
        # sends must not each wait for a receive that is only issued after them.
        got = torch.zeros(1 << 20)
        reqs = [dist.isend(torch.full((1 << 20,), float(rank)), nxt), dist.irecv(got, prv)]
        for r in reqs:
            r.wait()
        check(torch.all(got == prv), "large isend/irecv, both ranks sending first")
        got = torch.zeros(1 << 20)
        ops = [dist.P2POp(dist.isend, torch.full((1 << 20,), float(rank + 1)), nxt), dist.P2POp(dist.irecv, got, prv)]
        for r in dist.batch_isend_irecv(ops):
            r.wait()
        check(torch.all(got == prv + 1), "batch_isend_irecv")
        got = torch.zeros(1 << 20)
        req = dist.isend(torch.full((1 << 20,), float(rank + 2)), nxt)
        dist.recv(got, prv)  # a blocking receive behind a pending send
        req.wait()
        check(torch.all(got == prv + 2), "isend then a blocking recv")
        # torch >= 2.1's coalescing manager (what batch_isend_irecv uses for CUDA tensors in
        # 2.1-2.4) brackets the sends and receives with the backend's start/endCoalescing.
        manager = getattr(dist, "_coalescing_manager", None)
        if manager is not None and "async_ops" in inspect.signature(manager).parameters:
            got = torch.zeros(5)
            with manager(device=torch.device("cpu"), async_ops=True) as cm:
                dist.isend(torch.full((5,), float(rank + 3)), nxt)
                dist.irecv(got, prv)
            cm.wait()
            check(torch.all(got == prv + 3), "sends and receives in a coalescing manager")
            with manager(device=torch.device("cpu"), async_ops=True) as cm:
                pass
            cm.wait()  # nothing held back: a Work done at once
    dist.barrier()

    # A subgroup of the even ranks.
    evens = list(range(0, n, 2))
    group = dist.new_group(evens)
    if rank in evens:
        t = torch.ones(3)
        dist.all_reduce(t, group=group)
        check(torch.all(t == len(evens)), f"subgroup all_reduce {t}")

    # A group whose last reference is a then() callback: it is destroyed on the thread that
    # completes futures, inside that callback (this aborted with "Resource deadlock avoided").
    # Rank 1 comes late, so every other rank's future is still pending when then() is attached.
    doomed = dist.new_group(list(range(n)))
    if rank == 1:
        time.sleep(0.5)
    pending = doomed.allreduce([torch.ones(4)]).get_future()
    chained = pending.then(lambda f, keep=doomed: f.value()[0] * 2)
    dist.destroy_process_group(doomed)
    del doomed
    check(torch.all(chained.wait() == 2 * n), f"a callback holding its group's last reference: {chained.value()}")

    compare_with_gloo(rank, n)

    # Errors come back as RuntimeError with Weft's words.
    try:
        dist.all_reduce(torch.ones(2, dtype=torch.int32), op=dist.ReduceOp.BAND)
        check(False, "a bitwise all_reduce succeeded")
    except RuntimeError as e:
        check("weft" in str(e) and "not supported" in str(e), f"error text: {e}")

    # Lists and splits that do not fit the tensors are refused before anything is read or
    # written (each would otherwise run past a buffer); types that do not match, likewise.
    def refused(what, call, words):
        try:
            call()
            check(False, f"{what} succeeded")
        except (RuntimeError, ValueError) as e:
            check(words in str(e), f"{what}: error text: {e}")

    refused("reduce_scatter with short pieces",
            lambda: dist.reduce_scatter(torch.zeros(4), [torch.ones(1) for _ in range(n)]), "must hold 4 elements")
    refused("all_gather into short tensors",
            lambda: dist.all_gather([torch.zeros(1) for _ in range(n)], torch.ones(3)), "must hold 3 elements")
    refused("all_to_all_single with splits that overrun",
            lambda: dist.all_to_all_single(torch.zeros(n), torch.ones(2 * n), [2] * n, [2] * n), "add up to")
    refused("all_reduce into an expanded tensor (one element, four views)",
            lambda: dist.all_reduce(torch.ones(1).expand(4)), "share memory")
    refused("all_gather into an expanded tensor",
            lambda: dist.all_gather([torch.zeros(1).expand(3) for _ in range(n)], torch.ones(3)), "share memory")
    refused("_all_gather_base into another type",
            lambda: dist._all_gather_base(torch.zeros(4 * n, dtype=torch.int8), torch.ones(4)), "types differ")
    # A throw while a Weft group is being built must not leave the group open: the next
    # collective still runs.
    refused("all_reduce_coalesced of bool with AVG",
            lambda: dist.all_reduce_coalesced([torch.ones(2, dtype=torch.bool)] * 2, op=dist.ReduceOp.AVG),
            "cannot be averaged")
    # Bools as with NCCL: SUM is a logical or, PRODUCT a logical and.
    flags = torch.tensor([rank == 0, False, True])
    dist.all_reduce(flags)
    check(flags.tolist() == [True, False, True], f"bool SUM (or): {flags}")
    flags = torch.tensor([rank != 0, True, False])
    dist.all_reduce(flags, op=dist.ReduceOp.PRODUCT)
    check(flags.tolist() == [n == 1, True, False], f"bool PRODUCT (and): {flags}")
    t = torch.ones(3)
    dist.all_reduce(t)
    check(torch.all(t == n), f"all_reduce after a refused coalesced call: {t}")
    # As ProcessGroupNCCL: the factor would be cast to an integer tensor's type (0.5 to 0).
    refused("PREMUL_SUM on int32", lambda: dist.all_reduce(torch.ones(2, dtype=torch.int32),
                                                           op=dist._make_nccl_premul_sum(0.5)), "floating-point")
    # A send to this rank itself is refused (by torch 2.x itself; by Weft before it runs, on
    # 1.13) and leaves the group usable.
    try:
        dist.send(torch.ones(2), rank)
        check(False, "a send to this rank itself succeeded")
    except (RuntimeError, ValueError) as e:
        check("itself" in str(e) or "same as" in str(e), f"send to self: error text: {e}")
    t = torch.ones(3)
    dist.all_reduce(t)
    check(torch.all(t == n), f"all_reduce after a refused send to self: {t}")
    # Tags are ignored, as with NCCL (gloo matches them): a tagged send says so, on stderr.
    if n > 1:
        def tagged():
            if rank == 0:
                dist.send(torch.ones(2), 1, tag=7)
            elif rank == 1:
                dist.recv(torch.zeros(2), 0, tag=7)
        said = stderr_of(tagged)
        check(rank > 1 or "tags are ignored" in said, f"no warning for a tagged send/recv: {said!r}")
    # wait(timeout) keeps the timeout it is given, however long the group's is. The other
    # ranks join 3 s late; rank 0 waits 1 s (it waited 3 s before), then for good.
    if n > 1:
        if rank != 0:
            time.sleep(3)
        work = dist.all_reduce(torch.ones(2), async_op=True)
        if rank == 0:
            started = time.monotonic()
            refused("wait(1 s) on an all-reduce that takes 3 s",
                    lambda: work.wait(timeout=datetime.timedelta(seconds=1)), "timed out after 1000 ms")
            waited = time.monotonic() - started
            check(waited < 2.5, f"wait(timeout=1 s) returned after {waited:.2f} s")
        work.wait()
    # A timeout of centuries is a long one, not an overflow that times out at once.
    forever = dist.new_group(backend="weft", timeout=datetime.timedelta(seconds=9e9))
    t = torch.ones(3)
    dist.all_reduce(t, group=forever)
    check(torch.all(t == n), f"all_reduce in a group with a timeout of centuries: {t}")

    # A send that cannot be issued (its communicator failed) ends in an error through its Work and
    # its future; a callback chained on that future that runs another collective fails too.
    if n > 1:
        broken = dist.new_group(backend="weft")
        refused("sends and receives of mismatched sizes", lambda: [r.wait() for r in (
            dist.isend(torch.ones(4), nxt, group=broken),
            dist.irecv(torch.zeros(5, dtype=torch.float64), prv, group=broken))], "weft")
        work = dist.isend(torch.ones(4), nxt, group=broken)
        chained = work.get_future().then(lambda f: dist.all_reduce(torch.ones(1), group=broken))
        refused("a send on a failed communicator", work.wait, "weft")
        refused("a callback's collective on a failed communicator", chained.wait, "weft")

    # A group destroyed with collectives on temporaries still in flight: their Works go on the
    # backend's threads, which need the GIL to free the tensors. Destroy used to join those
    # threads holding the GIL, and hung.
    doomed = dist.new_group(backend="weft")
    for _ in range(20):
        dist.all_reduce(torch.ones(4), group=doomed, async_op=True)
    dist.destroy_process_group(doomed)
    del doomed

    dist.barrier()  # rank 0 hosts the env:// store: nobody may still be using it when it goes
    dist.destroy_process_group()

    # An explicit store instead of env://.
    store = dist.FileStore(os.environ["WEFT_TEST_STORE"], n) if "WEFT_TEST_STORE" in os.environ else None
    if store is not None:
        dist.init_process_group("weft", store=store, rank=rank, world_size=n)
        t = torch.ones(4)
        dist.all_reduce(t)
        check(torch.all(t == n), "all_reduce over an explicit store")
        dist.barrier()
        dist.destroy_process_group()
    print(f"rank {rank}: weft backend ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
