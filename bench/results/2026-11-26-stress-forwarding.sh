#!/usr/bin/env bash
# Soak of random verified collectives over the forwarding paths, one configuration after another.
cd "$(dirname "$0")/../.."
run() {
  local name=$1; shift
  echo "== $name: $*"
  local t0=$(date +%s)
  "$@" 2>&1 | tail -3
  echo "exit ${PIPESTATUS[0]} after $(( $(date +%s) - t0 )) s"
}
S=20261126
run "shm 4 ranks, tuner's choice" env WEFT_TRANSPORT=shm build/bin/weftrun -n 4 build/bin/weft-stress -t 120 -s $S -m 4M
run "shm 3 ranks, ring everywhere" env WEFT_TRANSPORT=shm WEFT_ALGO=ring build/bin/weftrun -n 3 build/bin/weft-stress -t 90 -s $S -m 4M
run "shm 5 ranks, tree everywhere" env WEFT_TRANSPORT=shm WEFT_ALGO=tree build/bin/weftrun -n 5 build/bin/weft-stress -t 90 -s $S -m 4M
run "shm 4 ranks, small ring (2 x 4 KiB slots): pieces fall back" env WEFT_TRANSPORT=shm WEFT_SHM_SLOTS=2 WEFT_SHM_SLOT_BYTES=4K build/bin/weftrun -n 4 build/bin/weft-stress -t 90 -s $S -m 4M
run "shm 3 ranks, forwarding on 2 ranks only (mixed: ranks need not agree)" env WEFT_TRANSPORT=shm build/bin/weftrun -n 3 bash -c 'if [ "$RANK" = 1 ]; then export WEFT_SHM_FORWARD=0; fi; exec build/bin/weft-stress -t 60 -s '$S' -m 4M'
run "socket 3 ranks" env WEFT_TRANSPORT=socket build/bin/weftrun -n 3 build/bin/weft-stress -t 60 -s $S -m 4M
