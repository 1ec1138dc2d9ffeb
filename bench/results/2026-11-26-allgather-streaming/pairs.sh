#!/usr/bin/env bash
# Adjacent before/after pairs, one size per run (about a second each), so that both runs of a
# pair fall in the same VM mode. Usage: pairs.sh PAIRS RANKS SIZE. Before: the temporary XAG=1
# switch (middle all-gather steps not streamed), after: the change. Prints one line per pair:
# mode (cpu-pair-latency median, ns), out-of-place us before, after, in-place us before, after.
set -u
cd "$(dirname "$0")/../../.."
pairs=$1 n=$2 size=$3
one() { env "$@" WEFT_TRANSPORT=shm build/bin/weftrun -n "$n" build/bin/weft-perf -b "$size" -e "$size" -n 10 -w 3 -c 0 | grep -v '^#' | awk '{print $6, $10}'; }
for ((i = 1; i <= pairs; i++)); do
  mode=$(build/bin/cpu-pair-latency | awk '{print $(NF-2)}')
  if ((i % 2)); then b=$(one XAG=1); a=$(one A=1); else a=$(one A=1); b=$(one XAG=1); fi
  read -r bo bi <<< "$b"; read -r ao ai <<< "$a"
  echo "$n $size $mode $bo $ao $bi $ai"
done
