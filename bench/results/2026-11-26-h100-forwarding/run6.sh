#!/bin/bash
# Device run 6, 2026-11-26 (evening): the GPU checks on the code with shared-memory forwarding
# (nothing after 10d574e had run on a GPU) and the failure fixes of the IPC path, then issue 3's
# side-by-side with Open MPI and issue 7's DDP MLP on the machine's 16 CPUs, forwarding on.
# Run from the repository root with OUT set; the pack (BUILD_DIR=build tools/gpu-check --pack .gpu,
# plus .gpu/fmnist: Fashion-MNIST's test set and the first 4000 training images) carried as .gpu.
set -u
root=$PWD
W=/tmp/w
mkdir -p "$W/gpu"
exec > >(tee "$OUT/log.txt") 2>&1
start=$SECONDS
touch /tmp/marker
newmd() { find bench/results -maxdepth 1 -name '*.md' -newer /tmp/marker -exec cp {} "$W/" \; ; }
LIMIT=${LIMIT:-460}
pack() { cp "$OUT/log.txt" "$W/" 2>/dev/null; tar -C /tmp -czf "$OUT/w.tgz" w 2>/dev/null; }
# Seconds for a step: at most $1, never past LIMIT (less 10 s for packing).
cap() { local l=$((LIMIT - 10 - (SECONDS - start))); ((l > $1)) && l=$1; ((l < 5)) && l=5; echo $l; }
step() { echo; echo "== [$((SECONDS - start)) s] $*"; }

step machine
date -u; nproc; uname -r; lscpu | grep -E "Model name|L3"; cat /proc/loadavg
command -v mpirun python3; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
export LD_LIBRARY_PATH=$root/.gpu/lib
timeout 10 .gpu/bin/cpu-pair-latency 2>&1 | tail -2

step "GPU: tests, torch backend on CUDA tensors, kernel bench, all-reduce on 2 ranks (MPS), NCCL 1 rank"
PREBUILT=.gpu MPS=1 RANKS="2" MAX_BYTES=256M TIME_LIMIT=$(cap 200) STEP_LIMIT=130 \
  WEFT_CUDA_IPC_DIRECT_MIN_BYTES=16777216 tools/gpu-check "$W/gpu" > "$W/gpu/gpu-check.txt" 2>&1
echo "gpu-check exit $?"; grep -E "passed|failed|FAILED|SKIPPED|test cases|assertions|stopped|skipped" "$W/gpu/"*.log "$W/gpu/torch-cuda.txt" | tail -12
grep -E "^ *(268435456|16777216|1048576|8) " "$W/gpu/"weft-perf-allreduce-gpu-*.txt | head -12
pack

step "bench/compare --peer mpi --bind (Weft over shm, forwarding on, against the image's Open MPI)"
BUILD_DIR=$root/.gpu timeout -k 10 "$(cap 170)" bench/compare --peer mpi --bind > "$W/compare-mpi.txt" 2>&1
echo "exit $?"; tail -40 "$W/compare-mpi.txt"; newmd; pack

step "DDP MLP, 20M parameters, batch 1, 30 steps: weft and gloo take turns"
for round in 1 2; do
  for backend in weft gloo; do
    PYTHONPATH=$root/.gpu/torch-site timeout "$(cap 50)" .gpu/bin/weftrun -n 2 --timeout 120 python3 \
      examples/ddp/train_fashion_mnist.py --backend $backend --model mlp --max-steps 30 --batch 1 \
      --data .gpu/fmnist --save /tmp/m.pt > "$W/mlp-$backend-$round.txt" 2>&1
    echo "round $round $backend (exit $?): $(tail -1 "$W/mlp-$backend-$round.txt")"
  done
done
cat /proc/loadavg
pack
step done
