#!/usr/bin/env bash
# A/B/C of WEFT_SHM_SLOT_STORES (plain, auto, streaming) on one build, interleaved, with the
# VM's speed (cpu-pair-latency's median, ns) read before each run.
#   Usage: ab.sh RANKS ROUNDS [weft-perf size arguments]   (run from the repository root)
set -euo pipefail
n=${1:-2}
rounds=${2:-3}
sizes=${3:-"-b 1M -e 64M -f 4"}
for ((r = 1; r <= rounds; r++)); do
  for v in plain auto streaming; do
    lat=$(build/bin/cpu-pair-latency --seconds 0.2 | awk '{print $5}')
    echo "## round $r stores=$v pair-latency=$lat"
    # shellcheck disable=SC2086
    WEFT_DEBUG=INFO WEFT_SHM_SLOT_STORES=$v build/bin/weftrun -n "$n" build/bin/weft-perf $sizes -n 10 -w 3 -c 0 \
      >"/tmp/ab-$$.txt" 2>&1
    grep -E '^ +[0-9]' "/tmp/ab-$$.txt" | awk '{printf "%10s %9s %9s\n", $1, $6, $10}'
    echo "switches: $(grep -c 'stores now' "/tmp/ab-$$.txt" || true)"
  done
done
rm -f "/tmp/ab-$$.txt"
