#!/bin/bash
# Device run 7: forwarding off/on (WEFT_SHM_FORWARD=0/1), interleaved, on the 16-CPU host, with the
# pack of run 6. weft-perf all-reduce, float32 sum, unchecked; columns: forwarding, size, out-of-place
# time (us), in-place time (us).
set -u
export LD_LIBRARY_PATH=$PWD/.gpu/lib
ab() {  # ranks rounds min max
  for i in $(seq "$2"); do for fw in 0 1; do
    WEFT_SHM_FORWARD=$fw timeout 60 .gpu/bin/weftrun -n "$1" .gpu/bin/weft-perf -b "$3" -e "$4" -f 4 -n 10 -w 3 -c 0 2>&1 |
      grep -E "^ +[0-9]" | awk -v fw=$fw -v n="$1" '{print n, fw, $1, $6, $10}'
  done; done
}
{ ab 2 4 1M 64M; ab 4 2 1M 16M; } | tee "$OUT/ab-raw.txt"
python3 - "$OUT/ab-raw.txt" <<'PY'
import statistics, collections, sys
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    n, fw, size, oop, ip = line.split()
    d[(int(n), int(size), fw, 'oop')].append(float(oop)); d[(int(n), int(size), fw, 'ip')].append(float(ip))
print("ranks size: out of place off on off/on | in place off on off/on (medians, us)")
for n, s in sorted({(k[0], k[1]) for k in d}):
    m = lambda fw, kind: statistics.median(d[(n, s, fw, kind)])
    print(f"{n} {s:>10} {m('0','oop'):9.1f} {m('1','oop'):9.1f} {m('0','oop')/m('1','oop'):5.2f} | "
          f"{m('0','ip'):9.1f} {m('1','ip'):9.1f} {m('0','ip')/m('1','ip'):5.2f}")
PY
