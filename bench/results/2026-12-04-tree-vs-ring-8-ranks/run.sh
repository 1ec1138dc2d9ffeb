#!/usr/bin/env bash
# 8 ranks over shm, tree and ring alternating, out-of-place / in-place us per size (weft-perf).
cd /work/main
for rep in $(seq 1 ${REPS:-5}); do
  for a in tree ring; do
    line=$(WEFT_TRANSPORT=shm WEFT_ALGO=allreduce:$a build/bin/weftrun -n 8 build/bin/weft-perf allreduce \
      -b 256K -e 4M -f 2 -n 20 -w 3 -c 0 2>&1 | awk '$1 ~ /^[0-9]+$/ {printf "%s:%s/%s ", $1, $6, $10}')
    echo "$rep $a $line"
  done
done
