#!/usr/bin/env bash
# A/B of the forwarded piece's one-pass reduction (shm_connection.cc, landStraightIntoSend):
# "base" runs the library built before the change (copied to BASE_LIB), "new" the build tree's,
# interleaved, with the VM's speed (cpu-pair-latency's median, ns) read before each run.
#   Usage: BASE_LIB=DIR [PERF_FLAGS=-H] ab.sh ROUNDS [environment, e.g. WEFT_SHM_SLOT_STORES=streaming]
#   (run from the repository root; weft-perf's busbw in GB/s per size, 2 ranks bound to cores;
#   PERF_FLAGS: more weft-perf options, such as -H for buffers from weftHostMemAlloc)
set -euo pipefail
rounds=${1:-3}
shift || true
for ((r = 1; r <= rounds; r++)); do
  for v in base new; do
    lib=""
    [[ $v == base ]] && lib=${BASE_LIB:?BASE_LIB: the directory holding the earlier libweft.so.0}
    lat=$(build/bin/cpu-pair-latency --seconds 0.3 | awk '{print $5}')
    printf 'round %d %-4s pair-latency=%-4s ' "$r" "$v" "$lat"
    env LD_LIBRARY_PATH="$lib" WEFT_TRANSPORT=shm "$@" build/bin/weftrun -n 2 --bind-to core \
      build/bin/weft-perf allreduce -b 1M -e 256M -f 4 -d float -o sum -c 0 -n 10 -w 3 ${PERF_FLAGS:-} |
      awk '$1 + 0 >= 1048576 { printf "%s:%s ", $1 / 1048576 "M", $8 } END { print "" }'
  done
done
