#!/usr/bin/env bash
# End-to-end: weft-perf under each launcher, data checked, JSON parsed, usage errors.
#   weft_perf_e2e.sh BIN_DIR weftrun|collectives|hostmem|mpirun|json|measure|usage
#   weft_perf_e2e.sh BIN_DIR checker SHIM.so
# Exit 77 (ctest: skipped) when the launcher is not installed.
set -euo pipefail
bin=$1
mode=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/weft-e2e.XXXXXX")
trap 'rm -rf "$work"' EXIT

check_table() {  # every row has 0 wrong (or -: sendrecv has no in-place run) and the footer is there
  local out=$1
  grep -q "^# Avg bus bandwidth" "$out" || { echo "no '# Avg bus bandwidth' line"; cat "$out"; exit 1; }
  grep -q "^# Out of bounds values : 0 OK" "$out" || { echo "the footer does not say 0 OK"; cat "$out"; exit 1; }
  awk '/^ +[0-9]/ && NF == 13 { if ($9 != 0 || ($13 != 0 && $13 != "-")) { print "wrong elements: " $0; bad = 1 } ; rows++ }
       END { if (!rows) { print "no rows"; bad = 1 } ; exit bad }' "$out"
}

case $mode in
  weftrun)
    for n in 1 2 3; do
      "$bin/weftrun" -n "$n" --timeout 120 "$bin/weft-perf" -b 8 -e 1M -f 4 -n 3 -w 1 -c 1 -d all -o all \
        > "$work/out" 2>&1 || { cat "$work/out"; exit 1; }
      check_table "$work/out"
    done
    ;;
  collectives)
    for coll in broadcast reduce allgather reducescatter alltoall sendrecv gather scatter; do
      for n in 1 3; do
        "$bin/weftrun" -n "$n" --timeout 120 "$bin/weft-perf" "$coll" -b 8 -e 256K -f 8 -n 2 -w 1 -c 1 -d all \
          -o all -r $((n - 1)) > "$work/out" 2>&1 || { echo "weft-perf $coll on $n ranks:"; cat "$work/out"; exit 1; }
        check_table "$work/out"
        grep -q "^# weft-perf $coll:" "$work/out" || { echo "no '$coll' banner"; cat "$work/out"; exit 1; }
      done
    done
    ;;
  hostmem)  # -H: buffers from weftHostMemAlloc; large all-reduces read the peers' buffers directly
    for n in 2 3; do
      WEFT_DEBUG=INFO "$bin/weftrun" -n "$n" --timeout 120 "$bin/weft-perf" -H -b 1M -e 8M -f 8 -n 2 -w 1 -c 1 \
        -d float -o all > "$work/out" 2> "$work/log" || { cat "$work/out" "$work/log"; exit 1; }
      check_table "$work/out"
      direct=$(grep -c "read the peers' buffers directly" "$work/log" || true)
      [[ $direct == "$n" ]] || { echo "want the direct path on all $n ranks, got $direct:"; cat "$work/log"; exit 1; }
    done
    ;;
  mpirun)
    command -v mpirun >/dev/null || { echo "mpirun not installed (Debian: openmpi-bin): skipped"; exit 77; }
    mpirun --allow-run-as-root --oversubscribe -np 3 "$bin/weft-perf" -b 8 -e 1M -f 8 -n 3 -w 1 -c 1 \
      > "$work/out" 2>&1 || { cat "$work/out"; exit 1; }
    check_table "$work/out"
    ;;
  json)
    "$bin/weftrun" -n 2 --timeout 120 "$bin/weft-perf" -b 1K -e 64K -f 4 -n 2 -w 1 -J "$work/rows.json" > /dev/null
    /usr/bin/python3 - "$work/rows.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
assert [r["size"] for r in rows] == [1024, 4096, 16384, 65536], rows
for r in rows:
    assert r["nranks"] == 2 and r["collective"] == "allreduce" and r["type"] == "float"
    assert r["oop"]["wrong"] == 0 and r["ip"]["wrong"] == 0 and r["oop"]["busbw"] > 0
PY
    ;;
  measure)  # WEFT_TUNE=measure: every rank adopts rank 0's fitted costs, then runs as usual
    for n in 2 3; do
      WEFT_TUNE=measure WEFT_DEBUG=INFO "$bin/weftrun" -n "$n" --timeout 120 "$bin/weft-perf" -b 8 -e 4M -f 8 -n 3 \
        -w 1 -c 1 > "$work/out" 2> "$work/log" || { cat "$work/out" "$work/log"; exit 1; }
      check_table "$work/out"
      grep -o "measured links: .*" "$work/log" > "$work/links" || true
      if [[ $(wc -l < "$work/links") != "$n" || $(sort -u "$work/links" | wc -l) != 1 ]]; then
        echo "want one identical 'measured links' line per rank:"; cat "$work/log"; exit 1
      fi
      if ! grep -Eq "^measured links: alpha [0-9.]+ us, [0-9.]+ GB/s from memory, [0-9.]+ GB/s in cache, [0-9.]+ GB/s in L2; arena [0-9.]+ us, [0-9.]+ GB/s; tree hop crowding [0-9.]+$" "$work/links" ||
         grep -q " 0.00 " "$work/links"; then
        echo "a malformed or zero measurement:"; cat "$work/links"; exit 1
      fi
    done
    ;;
  checker)  # an all-gather that does nothing in place (tests/noop_inplace_allgather.c) is caught
    set +e
    LD_PRELOAD=$3 "$bin/weftrun" -n 2 --timeout 120 "$bin/weft-perf" allgather -d float -b 64 -e 4K -f 4 -n 2 -w 1 \
      > "$work/out" 2>&1
    rc=$?
    set -e
    if [[ $rc == 0 ]] || ! grep -q "^# Out of bounds values : [1-9][0-9]* FAILED" "$work/out"; then
      echo "an all-gather that ignored in-place calls passed the check (exit $rc):"; cat "$work/out"; exit 1
    fi
    # Out of place the library is Weft's own: 0 wrong there, wrong elements in every in-place column.
    awk '/^ +[0-9]/ && NF == 13 { if ($9 != 0 || $13 == 0) { print "unexpected: " $0; bad = 1 } ; rows++ }
         END { exit bad || !rows }' "$work/out" || { cat "$work/out"; exit 1; }
    ;;
  usage)
    for args in "-b" "-b 1X" "-d nosuchtype" "-o nosuchop" "-n 0" "-e 8 -b 1K" "--nosuchflag" "nosuchcollective" \
                "-b 18446744073709551615 -e 18446744073709551615" "-e 2000000G" \
                "broadcast -r x" "broadcast -r 1" "-J /nonexistent-folder/out.json" "-d double -b 1 -e 7"; do
      set +e
      # shellcheck disable=SC2086
      RANK=0 WORLD_SIZE=1 "$bin/weft-perf" $args > "$work/out" 2>&1
      rc=$?
      set -e
      if [[ $rc != 2 ]]; then echo "weft-perf $args: exit $rc, want 2"; cat "$work/out"; exit 1; fi
    done
    ;;
  *) echo "unknown mode $mode"; exit 2 ;;
esac
echo "weft-perf $mode: ok"
