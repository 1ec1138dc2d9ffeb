#!/bin/bash
B=${BIN:-build/bin}
run() { env $1 WEFT_TRANSPORT=shm WEFT_ALGO=allreduce:tree $B/weftrun -n 8 $B/weft-perf allreduce -b 512K -e 8M -f 2 -n 10 -w 3 -c 0 -J /tmp/ab.json >/dev/null 2>&1 || echo FAIL;
  python3 -c "
import json; rows=json.load(open('/tmp/ab.json')); print('$2', ' '.join('%d:%.0f/%.0f'%(r['size']>>10, r['oop']['time_us'], r['ip']['time_us']) for r in rows))"; }
for i in 1 2 3; do run LD_LIBRARY_PATH=${BASE_LIB:-/tmp/base-lib} base; run X=1 new; done
