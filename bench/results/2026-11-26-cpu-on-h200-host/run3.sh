#!/bin/bash
# Device run 3: the streaming-store threshold from each CPU's share of the L3 (new) against the
# old share per rank (WEFT_STREAMING_MIN_BYTES set to what it gave), out of place; and one rank's
# DDP MLP step (gloo, nothing to exchange) for the compute every backend shares.
set -u
exec > >(tee "$OUT/stream.txt") 2>&1
export LD_LIBRARY_PATH=$PWD/.gpu/lib
B=.gpu/bin
cat /proc/loadavg
WEFT_DEBUG=INFO timeout 20 $B/weftrun -n 2 --bind-to core $B/weft-perf allreduce -b 32M -e 32M -n 2 -w 1 -c 1 2>&1 | grep -i -m4 "cache\|stream\|topology"
perf() {  # label, N, then env settings
  local label=$1 n=$2; shift 2
  echo "-- $label ($n ranks)"
  env WEFT_TRANSPORT=shm "$@" timeout 60 $B/weftrun -n $n --bind-to core $B/weft-perf allreduce -b 4M -e 256M -f 2 -n 10 -w 3 -c 1 2>&1 |
    awk '$1 ~ /^[0-9]+$/ {printf "  %10s %9s us %6s GB/s  wrong %s\n", $1, $6, $8, $9} /Out of bounds/'
}
for round in 1 2; do
  perf new 2
  perf old 2 WEFT_STREAMING_MIN_BYTES=75M
done
perf new 4
perf old 4 WEFT_STREAMING_MIN_BYTES=39321600
echo "-- DDP MLP, one rank (gloo), batch 1, 30 steps"
for i in 1 2; do
  timeout 60 $B/weftrun -n 1 python3 examples/ddp/train_fashion_mnist.py --backend gloo --model mlp --max-steps 30 --batch 1 \
    --data .gpu/fmnist1k --save /tmp/m.pt 2>&1 | tail -1
done
cat /proc/loadavg
