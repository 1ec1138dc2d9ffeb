#!/bin/bash
# Device run 8: where the small all-reduce on device buffers spends its time, under MPS, 2 ranks on
# the one GPU: the default path (device barriers), barriers through the host, staged through host
# memory (no IPC), and one rank alone. weft-perf all-reduce --gpu, 8 B to 64 KiB.
set -u
export LD_LIBRARY_PATH=$PWD/.gpu/lib
nvidia-cuda-mps-control -d && trap 'echo quit | nvidia-cuda-mps-control' EXIT
perf() { timeout 60 .gpu/bin/weftrun -n "$1" .gpu/bin/weft-perf allreduce --gpu -b 8 -e 64K -f 8 -n 200 -w 20 2>&1 | grep -E "^ +[0-9]"; }
echo "== 2 ranks, default"; perf 2
echo "== 2 ranks, WEFT_CUDA_IPC_SYNC=host"; WEFT_CUDA_IPC_SYNC=host perf 2
echo "== 2 ranks, WEFT_CUDA_IPC=0 (staged)"; WEFT_CUDA_IPC=0 perf 2
echo "== 1 rank"; perf 1
echo "== 2 ranks, default, again"; perf 2
