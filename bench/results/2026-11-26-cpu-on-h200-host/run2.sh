#!/bin/bash
# Device run 2: which shared-memory settings move Weft's 1-64 MiB all-reduce on 16 cores.
set -u
exec > >(tee "$OUT/knobs.txt") 2>&1
export LD_LIBRARY_PATH=$PWD/.gpu/lib
B=.gpu/bin
cat /proc/loadavg
timeout 20 $B/weftrun -n 2 --bind-to core $B/mem-bound-probe -b 1M -e 64M -f 4 -t 0.25 2>&1 | tail -6
perf() {  # label, then env settings
  local label=$1; shift
  echo "-- $label"
  env WEFT_TRANSPORT=shm "$@" timeout 40 $B/weftrun -n ${N:-2} --bind-to core $B/weft-perf allreduce -b 1M -e 64M -f 4 -n 20 -w 5 -c 0 2>&1 |
    awk '$1 ~ /^[0-9]+$/ {printf "  %10s %9s us %6s GB/s\n", $1, $6, $8}'
}
perf default
perf cma256K WEFT_SHM_REMOTE_READ_MIN_BYTES=256K
perf cma1M WEFT_SHM_REMOTE_READ_MIN_BYTES=1M
perf slot256Kx16 WEFT_SHM_SLOT_BYTES=256K
perf slot1Mx8 WEFT_SHM_SLOT_BYTES=1M WEFT_SHM_SLOTS=8
perf slot16Kx64 WEFT_SHM_SLOT_BYTES=16K WEFT_SHM_SLOTS=64
perf chunk256K WEFT_CHUNK_BYTES=256K
perf chunk4M WEFT_CHUNK_BYTES=4M
perf stream64K WEFT_STREAMING_MIN_BYTES=64K
perf streamNever WEFT_STREAMING_MIN_BYTES=4G
perf oneshot WEFT_ALGO=allreduce:oneshot WEFT_ONESHOT_MAX_BYTES=4G
perf spin0 WEFT_SPIN_US=0
N=4 perf 4ranks-default
N=4 perf 4ranks-cma256K WEFT_SHM_REMOTE_READ_MIN_BYTES=256K
N=4 perf 4ranks-slot256K WEFT_SHM_SLOT_BYTES=256K
cat /proc/loadavg
