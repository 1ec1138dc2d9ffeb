"""PyTorch DDP on the "weft" backend:
  * 2 ranks x batch b end with the same parameters as 1 process x batch 2b after k SGD steps;
  * a DDP communication hook (torch's allreduce_hook, which runs on Work futures);
  * a checkpoint saved on rank 0 and loaded by every rank after a barrier.
Run under weftrun -n 2. With --fault it launches two ranks itself, kills one mid-training and
checks that the survivor gets an exception (not a hang)."""

import argparse
import datetime
import os
import socket
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

import weft_torch  # noqa: F401


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(20, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 5))


def data(step, batch):
    g = torch.Generator().manual_seed(step)
    return torch.randn(batch, 20, generator=g), torch.randint(0, 5, (batch,), generator=g)


def check(cond, what):
    if not cond:
        raise AssertionError(f"rank {dist.get_rank()}: {what}")


def equivalence_and_hook_and_checkpoint():
    dist.init_process_group("weft", timeout=datetime.timedelta(seconds=60))
    rank, n = dist.get_rank(), dist.get_world_size()
    b, steps = 8, 5
    for hook in (False, True):
        net = DDP(mlp())
        if hook:
            net.register_comm_hook(state=None, hook=default_hooks.allreduce_hook)
        reference = mlp()  # every rank also trains one process's worth of the full batch
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
        for step in range(steps):
            x, y = data(step, b * n)
            opt.zero_grad()
            nn.functional.cross_entropy(net(x[rank * b:(rank + 1) * b]), y[rank * b:(rank + 1) * b]).backward()
            opt.step()
            ref_opt.zero_grad()
            nn.functional.cross_entropy(reference(x), y).backward()
            ref_opt.step()
        for p, q in zip(net.module.parameters(), reference.parameters()):
            check(torch.allclose(p, q, rtol=1e-5, atol=1e-6),
                  f"{'hooked ' if hook else ''}DDP differs from one process: max {float((p - q).abs().max())}")

    # Checkpoint: rank 0 saves, everyone loads after a barrier.
    path = os.environ.get("WEFT_TEST_CHECKPOINT", os.path.join(tempfile.gettempdir(), "weft-ddp-ckpt.pt"))
    if rank == 0:
        torch.save(net.module.state_dict(), path)
    dist.barrier()
    fresh = nn.Sequential(nn.Linear(20, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 5))
    fresh.load_state_dict(torch.load(path))
    for p, q in zip(fresh.parameters(), net.module.parameters()):
        check(torch.equal(p, q), "checkpoint loaded by every rank differs")
    dist.barrier()
    if rank == 0:
        os.remove(path)
    dist.destroy_process_group()
    print(f"rank {rank}: ddp ok")


def fault_rank():
    dist.init_process_group("weft", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    net = DDP(mlp())
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    try:
        for step in range(1000):
            if rank == 1 and step == 3:
                os._exit(0)  # dies mid-training, without a word
            x, y = data(step, 8)
            opt.zero_grad()
            nn.functional.cross_entropy(net(x), y).backward()
            opt.step()
    except RuntimeError as e:
        print(f"rank {rank}: caught after the peer died: {str(e).splitlines()[0][:200]}", flush=True)
        os._exit(0)
    print(f"rank {rank}: no error although the peer died", flush=True)
    os._exit(1)


def launch_fault():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(2):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r), WORLD_SIZE="2",
                   LOCAL_RANK=str(r))
        procs.append(subprocess.Popen([sys.executable, __file__, "--fault-rank"], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    start = time.time()
    out0, _ = procs[0].communicate(timeout=120)
    procs[1].wait(timeout=30)
    elapsed = time.time() - start
    print(out0.strip().splitlines()[-1] if out0.strip() else "(no output)")
    ok = procs[0].returncode == 0 and "caught" in out0
    print(f"fault: survivor {'raised' if ok else 'did NOT raise'} within {elapsed:.1f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--fault", action="store_true")
    parser.add_argument("--fault-rank", action="store_true")
    args = parser.parse_args()
    if args.fault:
        sys.exit(launch_fault())
    if args.fault_rank:
        fault_rank()
    equivalence_and_hook_and_checkpoint()
