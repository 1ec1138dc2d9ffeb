#!/usr/bin/env bash
# A/B of the direct all-reduce's streaming switch from the L2 (coll::directStreamingMinBytes):
# "base" runs the library built before the change (copied to BASE_LIB), "new" the build tree's,
# interleaved, with the VM's speed (cpu-pair-latency's median, ns) read before each run.
#   Usage: BASE_LIB=DIR ab.sh RANKS ROUNDS   (run from the repository root; weft-perf's busbw out
#   of place, GB/s, per size, on weftHostMemAlloc buffers; 2 ranks bound to a core each)
set -euo pipefail
ranks=${1:?RANKS}
rounds=${2:-3}
bind=()
((ranks <= 2)) && bind=(--bind-to core)
for ((r = 1; r <= rounds; r++)); do
  for v in base new; do
    lib=""
    [[ $v == base ]] && lib=${BASE_LIB:?BASE_LIB: the directory holding the earlier libweft.so.0}
    lat=$(build/bin/cpu-pair-latency --seconds 0.3 | awk '{print $5}')
    printf 'round %d %-4s pair-latency=%-4s ' "$r" "$v" "$lat"
    env LD_LIBRARY_PATH="$lib" WEFT_TRANSPORT=shm build/bin/weftrun -n "$ranks" "${bind[@]}" \
      build/bin/weft-perf allreduce -b 1M -e 16M -f 2 -d float -o sum -c 0 -n 20 -w 3 -H |
      awk '$1 + 0 >= 1048576 { printf "%s:%s ", $1 / 1048576 "M", $8 } END { print "" }'
  done
done
