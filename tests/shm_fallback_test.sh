#!/usr/bin/env bash
# A /dev/shm too small for the rings (a common container limit), made with a private mount
# namespace and a 64 KiB tmpfs: by default the ranks fall back to sockets with a WARN naming the
# size needed and the override; with WEFT_TRANSPORT=shm they fail with a clear error. Never SIGBUS.
#   shm_fallback_test.sh BIN_DIR        (exit 77: skipped, no permission for mount namespaces)
set -uo pipefail
bin=$1
if ! unshare -m --propagation private true 2>/dev/null; then
  echo "cannot create a mount namespace here (needs root or user namespaces): skipped"
  exit 77
fi
run_tiny() {  # runs "$@" with a 64 KiB /dev/shm (SHM_SIZE: another size)
  unshare -m --propagation private bash -c \
    'mount -t tmpfs -o size="$0",mode=1777 tmpfs /dev/shm && exec "$@"' "${SHM_SIZE:-64k}" "$@"
}
out=$(mktemp)
trap 'rm -f "$out"' EXIT

run_tiny "$bin/weftrun" -n 2 --timeout 60 "$bin/weft-perf" -b 8 -e 4M -f 8 -n 2 -w 1 -c 1 > "$out" 2>&1
rc=$?
if [[ $rc != 0 ]]; then echo "auto: weft-perf failed ($rc) on a tiny /dev/shm:"; cat "$out"; exit 1; fi
grep -q "falling back to sockets" "$out" || { echo "auto: no fallback WARN line:"; cat "$out"; exit 1; }
grep -q "WEFT_SHM_DISABLE=1" "$out" || { echo "auto: the WARN does not name the override:"; cat "$out"; exit 1; }
grep -qE "needs [0-9]+ bytes" "$out" || { echo "auto: the WARN does not name the size:"; cat "$out"; exit 1; }
grep -q "connection to" "$out" && true
echo "auto: fell back to sockets with: $(grep -m1 'falling back' "$out" | cut -c1-200)"

WEFT_TRANSPORT=shm run_tiny "$bin/weftrun" -n 2 --timeout 60 "$bin/weft-perf" -b 8 -e 64K -n 2 -w 1 > "$out" 2>&1
rc=$?
if [[ $rc == 0 ]]; then echo "forced: succeeded without room for the rings?"; cat "$out"; exit 1; fi
if ((rc > 128)); then echo "forced: died by signal $((rc - 128)):"; cat "$out"; exit 1; fi
grep -q "WEFT_TRANSPORT=shm, but shared memory" "$out" || { echo "forced: unclear error:"; cat "$out"; exit 1; }
echo "forced: failed cleanly (exit $rc) with: $(grep -m1 'WEFT_TRANSPORT=shm, but' "$out" | cut -c1-200)"

# Room for the 3 ranks' rings (6 x ~1 MiB) but not their arenas: every rank says so (a WARN, not
# only an INFO line), and the small collectives still run, on the connections.
SHM_SIZE=8m run_tiny "$bin/weftrun" -n 3 --timeout 60 "$bin/weft-perf" -b 8 -e 64K -f 8 -n 2 -w 1 -c 1 > "$out" 2>&1
rc=$?
if [[ $rc != 0 ]]; then echo "arena: weft-perf failed ($rc):"; cat "$out"; exit 1; fi
if grep -q "falling back to sockets" "$out"; then
  echo "arena: the rings did not fit in 8 MiB here (ring size changed?):"; cat "$out"; exit 1
fi
[[ $(grep -c "WARN no shared-memory arena" "$out") == 3 ]] || { echo "arena: not every rank warned:"; cat "$out"; exit 1; }
echo "arena: $(grep -m1 'no shared-memory arena' "$out" | cut -c1-160)"
