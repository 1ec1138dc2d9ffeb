"""A plain PyTorch DDP training script, the same model and data as train_fashion_mnist.cc; only
--backend changes between Weft and the others:

    weftrun -n 2 python3 examples/ddp/train_fashion_mnist.py --backend weft
    weftrun -n 2 python3 examples/ddp/train_fashion_mnist.py --backend gloo

(weftrun sets torchrun's variables; PYTHONPATH must reach weft_torch, e.g. build/python.)
"""

import argparse
import gzip
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(directory, prefix):
    images = torch.from_numpy(read_idx(os.path.join(directory, f"{prefix}-images-idx3-ubyte.gz")).copy())
    labels = torch.from_numpy(read_idx(os.path.join(directory, f"{prefix}-labels-idx1-ubyte.gz")).copy())
    images = ((images.float() / 255.0 - 0.2860) / 0.3530).unsqueeze(1)
    return TensorDataset(images, labels.long())


def mlp():
    """Communication-bound: 20.0M parameters (80 MB of gradients a step) for little compute."""
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                         nn.Linear(4096, 10))


def model():
    return nn.Sequential(
        nn.Conv2d(1, 16, 5, padding=2), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 5, padding=2), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(7 * 7 * 32, 10))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="weft")
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--max-steps", type=int, default=-1)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--save", default="fashion_mnist_model_py.pt")
    parser.add_argument("--model", choices=("cnn", "mlp"), default="cnn",
                        help="cnn: the seed model (default); mlp: a 20M-parameter MLP")
    parser.add_argument("--no-exchange", action="store_true",
                        help="for measuring: DDP with a comm hook that exchanges nothing, so each rank "
                             "trains alone; the step time every backend shares (weights then differ)")
    args = parser.parse_args()
    if args.backend == "weft":
        import weft_torch  # noqa: F401  (registers the backend)

    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    torch.manual_seed(1 + rank)  # DDP broadcasts rank 0's weights
    train, test = load(args.data, "train"), load(args.data, "t10k")
    net = DDP(model() if args.model == "cnn" else mlp())
    if args.no_exchange:
        def keep_own(_state, bucket):
            kept = torch.futures.Future()
            kept.set_result(bucket.buffer())
            return kept
        net.register_comm_hook(None, keep_own)
    optimizer = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9)
    sampler = DistributedSampler(train, shuffle=True, seed=42)
    loader = DataLoader(train, batch_size=args.batch, sampler=sampler)
    step = 0
    started = time.perf_counter()
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        net.train()
        total, count = 0.0, 0
        for images, labels in loader:
            if 0 <= args.max_steps <= step:
                break
            optimizer.zero_grad(set_to_none=True)  # torch 2.x's default; 1.13 zeroes in place unless asked
            loss = F.cross_entropy(net(images), labels)
            loss.backward()
            optimizer.step()
            total, count, step = total + loss.item(), count + 1, step + 1
            if step % 50 == 0:
                mean = torch.tensor([total / count / world])
                dist.all_reduce(mean)  # a sum: Gloo has no AVG
                if rank == 0:
                    print(f"epoch {epoch + 1} step {step}: loss {mean.item():.4f} (mean over ranks)", flush=True)
                total, count = 0.0, 0

    elapsed = torch.tensor([time.perf_counter() - started])
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    net.eval()
    test_sampler = DistributedSampler(test, shuffle=False, drop_last=True)
    correct = torch.zeros(2, dtype=torch.long)
    with torch.no_grad():
        for images, labels in DataLoader(test, batch_size=1000, sampler=test_sampler):
            correct[0] += (net(images).argmax(1) == labels).sum()
            correct[1] += len(labels)
    dist.all_reduce(correct)
    checksum = torch.tensor([sum(p.sum().item() for p in net.parameters())], dtype=torch.float64)
    spread = torch.stack([checksum, -checksum])
    dist.all_reduce(spread, op=dist.ReduceOp.MAX)
    same = spread[0].item() == -spread[1].item() or args.no_exchange
    if rank == 0:
        print(f"test accuracy: {100.0 * correct[0].item() / correct[1].item():.2f}% ({correct[0].item()} of "
              f"{correct[1].item()}) after {step} steps on {world} ranks with {args.backend}"
              f"{' (no exchange)' if args.no_exchange else ''}; weights equal on every rank: "
              f"{'not expected' if args.no_exchange else 'yes' if same else 'NO'}; training time {elapsed.item():.2f} s "
              f"({elapsed.item() / max(step, 1) * 1000:.1f} ms a step, slowest rank)")
        torch.save(net.module.state_dict(), args.save)
    dist.barrier()
    dist.destroy_process_group()
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
