#!/bin/bash
# Device run 5, 2026-11-26: the tree's new cost model (381975f, "new") against the one before it
# (33b47a0, "old") on the 16-core host: bench/tuner_accuracy.py --quick, defaults then measure,
# the two builds taking turns. Carried as .gpu2/{old,new}/{bin,lib} (weftrun, weft-perf, weft-topo,
# cpu-pair-latency; libweft and the libraries a bare image lacks).
set -u
W=/tmp/w5; mkdir -p $W
exec > >(tee "$OUT/log5.txt") 2>&1
start=$SECONDS; LIMIT=${LIMIT:-230}
left() { echo $((LIMIT - (SECONDS - start))); }
cat /proc/loadavg; nproc
run() {  # build, mode, round
  local v=$1 mode=$2 r=$3 l; l=$(left); ((l < 25)) && { echo "skipped $v $mode $r: out of time"; return; }
  LD_LIBRARY_PATH=$PWD/.gpu2/$v/lib BUILD_DIR=$PWD/.gpu2/$v timeout -k 5 $((l - 5)) python3 bench/tuner_accuracy.py --quick \
    --tune $mode --no-record > $W/tuner-$mode-$v-$r.txt 2>&1
  echo "[$((SECONDS - start)) s] $v $mode $r (exit $?): $(grep -E 'within' $W/tuner-$mode-$v-$r.txt | sed 's/.*measurement: //') | $(grep never $W/tuner-$mode-$v-$r.txt | sed 's/.*measured: //')"
}
run new defaults 1
run old defaults 1
for r in 1 2 3; do run old measure $r; run new measure $r; done
cat /proc/loadavg
cp "$OUT/log5.txt" $W/; tar -C /tmp -czf "$OUT/w5.tgz" w5
