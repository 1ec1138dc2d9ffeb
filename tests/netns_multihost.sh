#!/usr/bin/env bash
# Several "hosts" on one machine: each rank runs in its own network namespace (and UTS namespace,
# with its own host name, so Weft sees different hosts and uses sockets), the namespaces joined by
# veth pairs to a bridge in a switch namespace. The test builds all of it and tears it down.
#
#   netns_multihost.sh BIN_DIR collectives|shaped|linkdown|kill
#
#   collectives  3 hosts, weft-stress over every collective, every result verified
#   shaped       the same with every host's link shaped: tc netem delay/loss/reordering where the
#                kernel has netem, and a tbf rate limit (netem missing is reported, not failed)
#   linkdown     a host's link goes down mid-run: every rank ends with weftRemoteError naming a
#                peer, each within 2 x WEFT_TIMEOUT_MS of the link going down; the times are printed
#   kill         kill -9 of one rank mid-run: the survivors end with weftRemoteError within 2 x timeout
#
# Exit 77 (ctest: skipped) when network namespaces cannot be made (needs root / CAP_NET_ADMIN).
set -euo pipefail
bin=$1
mode=$2
nhosts=3
timeout_ms=3000
tag=w$$  # short: interface names are at most 15 characters
work=$(mktemp -d "${TMPDIR:-/tmp}/weft-netns.XXXXXX")

cleanup() {
  for ((h = 0; h < nhosts; ++h)); do ip netns del "${tag}h$h" 2> /dev/null || true; done
  ip netns del "${tag}sw" 2> /dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

if ! ip netns add "${tag}sw" 2> "$work/err"; then
  echo "skipped: cannot create network namespaces ($(cat "$work/err")); run as root"
  exit 77
fi
ip -n "${tag}sw" link add br0 type bridge
ip -n "${tag}sw" link set br0 up
for ((h = 0; h < nhosts; ++h)); do
  ns=${tag}h$h
  ip netns add "$ns"
  ip link add "${tag}v$h" type veth peer name "${tag}b$h"
  ip link set "${tag}v$h" netns "$ns"
  ip link set "${tag}b$h" netns "${tag}sw"
  ip -n "${tag}sw" link set "${tag}b$h" master br0
  ip -n "${tag}sw" link set "${tag}b$h" up
  ip -n "$ns" link set lo up
  ip -n "$ns" addr add "10.88.0.$((h + 1))/24" dev "${tag}v$h"
  ip -n "$ns" link set "${tag}v$h" up
done

shape_links() {
  local have_netem=1 h
  for ((h = 0; h < nhosts; ++h)); do
    if ! ip netns exec "${tag}h$h" tc qdisc add dev "${tag}v$h" root handle 1: netem delay 20ms 10ms \
        loss 2% reorder 5% 2> "$work/netem-err"; then
      have_netem=0
      break
    fi
  done
  if ((have_netem)); then
    for ((h = 0; h < nhosts; ++h)); do
      ip netns exec "${tag}h$h" tc qdisc add dev "${tag}v$h" parent 1: handle 2: tbf rate 200mbit burst 64kb \
        latency 500ms
    done
    echo "links: netem delay 20ms +-10ms, 2% loss, 5% reordering, tbf 200 Mbit/s"
  else
    echo "netem: not available in this kernel ($(cat "$work/netem-err")): delay, loss and reordering untested here"
    for ((h = 0; h < nhosts; ++h)); do
      ip netns exec "${tag}h$h" tc qdisc add dev "${tag}v$h" root tbf rate 200mbit burst 64kb latency 500ms
    done
    echo "links: tbf 200 Mbit/s"
  fi
}

# Starts rank h of the job in host h's namespaces, in the background; its output goes to
# $work/rank$h.log and its pid to pids[h].
secret=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
port=$((20000 + $$ % 20000))
pids=()
start_rank() {
  local h=$1
  shift
  ip netns exec "${tag}h$h" unshare --uts sh -c 'hostname "$0" && exec "$@"' "host$h" \
    env MASTER_ADDR=10.88.0.1 MASTER_PORT=$port RANK=$h WORLD_SIZE=$nhosts LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
    WEFT_SECRET="$secret" WEFT_SOCKET_IFNAME="=${tag}v$h" WEFT_TIMEOUT_MS=$timeout_ms "$@" \
    > "$work/rank$h.log" 2>&1 &
  pids[h]=$!
}

show_logs() {
  for ((h = 0; h < nhosts; ++h)); do
    echo "--- rank $h"
    cat "$work/rank$h.log"
  done
}

now_ms() { date +%s%3N; }

# Waits for every rank; fails unless each exit status is in the wanted class (ok / error).
wait_all() {
  local want=$1 h status bad=0
  for ((h = 0; h < nhosts; ++h)); do
    status=0
    wait "${pids[h]}" || status=$?
    if [[ $want == ok && $status != 0 ]] || [[ $want == error && $status == 0 ]]; then
      echo "rank $h exited $status, wanted $want"
      bad=1
    fi
  done
  if ((bad)); then
    show_logs
    exit 1
  fi
}

case $mode in
  collectives | shaped)
    iterations=300
    if [[ $mode == shaped ]]; then
      shape_links
      iterations=60
      timeout_ms=60000
    fi
    for ((h = 0; h < nhosts; ++h)); do start_rank "$h" "$bin/weft-stress" -i $iterations -s 5 -m 256K; done
    wait_all ok
    grep "weft-stress:" "$work/rank0.log"
    grep -q " 0 wrong, 0 out of bounds, 0 failed calls" "$work/rank0.log" || { show_logs; exit 1; }
    ;;
  linkdown | kill)
    for ((h = 0; h < nhosts; ++h)); do start_rank "$h" "$bin/weft-stress" -t 120 -s 6 -m 1M; done
    sleep 3  # well into the run
    t0=$(now_ms)
    if [[ $mode == linkdown ]]; then
      ip -n "${tag}h2" link set "${tag}v2" down
      echo "link of host 2 down"
    else
      kill -9 "${pids[1]}"
      echo "rank 1 killed"
    fi
    worst=0
    bad=0
    for ((h = 0; h < nhosts; ++h)); do
      if [[ $mode == kill && $h == 1 ]]; then
        wait "${pids[h]}" || true
        continue
      fi
      status=0
      wait "${pids[h]}" || status=$?
      elapsed=$(($(now_ms) - t0))
      echo "rank $h: exit status $status after $elapsed ms (timeout $timeout_ms ms)"
      ((elapsed > worst)) && worst=$elapsed
      if [[ $status == 0 ]]; then
        echo "rank $h finished as if nothing happened"
        bad=1
      elif ! grep -q "remote process exited or there was a network error" "$work/rank$h.log"; then
        echo "rank $h did not report weftRemoteError"  # the error string of weftRemoteError
        bad=1
      fi
      grep -m1 -E "weft-stress: rank [0-9]+: " "$work/rank$h.log" || true
    done
    echo "slowest rank to report the failure: $worst ms; limit $((2 * timeout_ms)) ms"
    if ((bad || worst > 2 * timeout_ms)); then
      show_logs
      exit 1
    fi
    ;;
  *)
    echo "unknown mode $mode"
    exit 2
    ;;
esac
echo "netns $mode: ok"
