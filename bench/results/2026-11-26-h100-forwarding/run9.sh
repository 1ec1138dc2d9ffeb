#!/bin/bash
# Device run 9: the small all-reduce on device buffers with the stream writing a flag instead of a
# host callback at each operation's end, and small calls' kernels reading the skip flag over the
# bus instead of from two copies ("new", .gpu), against HEAD before that ("old", .gpu-old):
# weft-perf on 2 ranks under MPS, taking turns; then the GPU tests and the torch CUDA test on new.
set -u
W=/tmp/w9; mkdir -p $W
exec > >(tee "$OUT/log9.txt") 2>&1
start=$SECONDS
nvidia-cuda-mps-control -d
perf() {  # pack
  LD_LIBRARY_PATH=$PWD/$1/lib:$PWD/.gpu/lib timeout 60 $1/bin/weftrun -n 2 $1/bin/weft-perf allreduce --gpu -b 8 -e 1M -f 8 \
    -n 200 -w 20 2>&1 | grep -E "^ +[0-9]" | awk -v v=$1 '{print v, $1, $6, $10, $9, $13}'
}
for r in 1 2 3; do perf .gpu-old; perf .gpu; done | tee $W/ab.txt
echo quit | nvidia-cuda-mps-control
echo "== [$((SECONDS - start)) s] tests and torch (gpu-check, no benchmarks)"
PREBUILT=.gpu RANKS="" MAX_BYTES=1M TIME_LIMIT=190 STEP_LIMIT=120 tools/gpu-check $W/gpu > $W/gpu-check.txt 2>&1
echo "gpu-check exit $?"
grep -E "passed|failed|FAILED|SKIPPED|test cases|assertions|stopped|skipped" $W/gpu/ctest-gpu.log $W/gpu/torch-cuda.txt | tail -8
echo "== [$((SECONDS - start)) s] done"
tar -C /tmp -czf "$OUT/w9.tgz" w9
