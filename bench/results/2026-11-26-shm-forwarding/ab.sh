#!/bin/bash
# usage: ab.sh N rounds minbytes maxbytes
n=$1; rounds=$2; b=$3; e=$4
for i in $(seq $rounds); do for fw in 0 1; do
  WEFT_SHM_FORWARD=$fw timeout 300 /work/main/build/bin/weftrun -n $n /work/main/build/bin/weft-perf -b $b -e $e -f 4 -n 10 -w 3 -c 0 2>&1 | grep -E "^ +[0-9]" | awk -v fw=$fw '{print fw, $1, $6, $10}'
done; done > /tmp/ab_raw.txt
python3 - <<'PY'
import statistics, collections
d=collections.defaultdict(list)
for line in open('/tmp/ab_raw.txt'):
    fw,size,oop,ip=line.split(); d[(int(size),fw,'oop')].append(float(oop)); d[(int(size),fw,'ip')].append(float(ip))
sizes=sorted({k[0] for k in d})
print("size  oop: off on ratio(off/on) | inplace: off on ratio")
for s in sizes:
    o0=statistics.median(d[(s,'0','oop')]); o1=statistics.median(d[(s,'1','oop')])
    i0=statistics.median(d[(s,'0','ip')]); i1=statistics.median(d[(s,'1','ip')])
    print(f"{s:>10} {o0:9.1f} {o1:9.1f} {o0/o1:5.2f} | {i0:9.1f} {i1:9.1f} {i0/i1:5.2f}")
PY
