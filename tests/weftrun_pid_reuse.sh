#!/bin/sh
# weftrun must never signal a process group once its rank's group is gone: after rank 0 exits,
# an unrelated process that takes rank 0's pid (forced through ns_last_pid in a pid namespace
# of the test's own) must survive the job's SIGTERM. Skips (77) where pid namespaces cannot be
# made or ns_last_pid is not writable (not root).
# Usage: weftrun_pid_reuse.sh WEFTRUN
set -u
weftrun=$1
if [ "${WEFT_PID_REUSE_INNER:-}" != 1 ]; then
  if ! unshare --pid --fork --mount-proc true 2>/dev/null; then
    echo "SKIP: cannot make a pid namespace here (unshare --pid needs root)"
    exit 77
  fi
  WEFT_PID_REUSE_INNER=1 exec unshare --pid --fork --mount-proc sh "$0" "$weftrun"
fi
[ -w /proc/sys/kernel/ns_last_pid ] || { echo "SKIP: /proc/sys/kernel/ns_last_pid is not writable"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$weftrun" -n 2 sh -c "if [ \$RANK = 0 ]; then echo \$\$ > $dir/rank0; exit 0; fi; sleep 30" &
launcher=$!
i=0
while [ ! -s "$dir/rank0" ] && [ $i -lt 300 ]; do sleep 0.01; i=$((i + 1)); done
rank0=$(cat "$dir/rank0")
# Rank 0 is gone and reaped once /proc no longer has it; then its pid is handed out again.
i=0
while [ -e "/proc/$rank0" ] && [ $i -lt 300 ]; do sleep 0.01; i=$((i + 1)); done
echo $((rank0 - 1)) > /proc/sys/kernel/ns_last_pid
setsid sleep 30 &
victim=$!
if [ "$victim" != "$rank0" ]; then
  echo "SKIP: the pid did not come round again ($victim, not $rank0)"
  kill "$launcher" "$victim"; wait
  exit 77
fi
sleep 0.2  # setsid has made the victim a group leader under rank 0's old pid
kill -TERM "$launcher"
wait "$launcher"
sleep 0.2
if kill -0 "$victim" 2>/dev/null; then
  kill "$victim"
  echo "ok: the process that took rank 0's pid was left alone"
  exit 0
fi
echo "FAIL: weftrun signalled the process group of a process that took rank 0's old pid"
exit 1
