#!/usr/bin/env bash
# Several "hosts" on one machine: each rank runs in its own network namespace (and UTS namespace,
# with its own host name, so Weft sees different hosts and uses sockets), the namespaces joined by
# veth pairs to a bridge in a switch namespace. The test builds all of it and tears it down.
#
#   netns_multihost.sh BIN_DIR MODE
#
#   collectives  3 hosts, weft-stress over every collective, every result verified
#   shaped       the same with every host's link shaped: tc netem delay/loss/reordering where the
#                kernel has netem, and a tbf rate limit (netem missing is reported, not failed)
#   linkdown     a host's link goes down mid-run: every rank ends with weftTimeout (silence: no
#                peer hung up) or weftRemoteError (a socket error), each within 2 x WEFT_TIMEOUT_MS
#                of the link going down; the times are printed
#   kill         kill -9 of one rank mid-run: the survivors end with weftRemoteError within 2 x timeout
#   hostname-root  the root named by a host name that is loopback on rank 0's host only, 2 ranks a
#                host numbered across hosts, each rank choosing its own interface
#   link-local   IPv6 link-local addresses only (the root at [fe80::1%<link>]), each rank choosing
#                its own: the peers' addresses, which travel without their scope, must still connect
#   weftrun      one weftrun per host (--nnodes 3 --node-rank h), 2 ranks each: weft-stress verified
#   plan         2 ranks per host numbered across hosts, every ring and tree algorithm forced in turn:
#                the planned ring and double binary tree, verified; then again with the topology
#                of tests/topo/server-2s.xml (two NICs a host: two channels, so the ring
#                all-reduce runs two rings, and every pair between hosts two streams)
#   rails        every host has two links (ens1f0 and ens2f0, on two bridges) and the topology of
#                tests/topo/server-2s.xml (two NICs by those names): weft-stress verified, then
#                an all-reduce (1 MiB to RAILS_MAX, default 4M) whose bytes must leave every host
#                by both links; with each link shaped to RAILS_RATE (default 100mbit), the times
#                over both rails are printed beside one rail with as many streams (a
#                measurement, not asserted); and with one host's second rail routed nowhere,
#                the streams there fall back to the main addresses and every result is right
#
# Exit 77 (ctest: skipped) when network namespaces cannot be made (needs root / CAP_NET_ADMIN).
set -euo pipefail
bin=$1
mode=$2
nhosts=3
timeout_ms=${NETNS_TIMEOUT_MS:-3000}  # NETNS_TIMEOUT_MS: longer for sanitizer builds
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
# link NS HOST BRIDGE NAME SUBNET: a veth from host HOST's namespace, named NAME there, to BRIDGE.
link() {
  local ns=$1 h=$2 bridge=$3 name=$4 subnet=$5
  ip link add "${tag}t$h" type veth peer name "${tag}$bridge$h"
  ip link set "${tag}t$h" netns "$ns"
  ip -n "$ns" link set "${tag}t$h" name "$name"
  ip link set "${tag}$bridge$h" netns "${tag}sw"
  ip -n "${tag}sw" link set "${tag}$bridge$h" master "$bridge"
  ip -n "${tag}sw" link set "${tag}$bridge$h" up
  ip -n "$ns" addr add "$subnet.$((h + 1))/24" dev "$name"
  ip -n "$ns" link set "$name" up
}

for bridge in b0 b1; do
  ip -n "${tag}sw" link add "$bridge" type bridge
  ip -n "${tag}sw" link set "$bridge" up
done
for ((h = 0; h < nhosts; ++h)); do
  ns=${tag}h$h
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  if [[ $mode == rails ]]; then
    link "$ns" "$h" b0 ens1f0 10.88.0
    link "$ns" "$h" b1 ens2f0 10.89.0
  else
    link "$ns" "$h" b0 "${tag}v$h" 10.88.0
  fi
done
ifname_of() { [[ $mode == rails ]] && echo "=ens1f0,ens2f0" || echo "=${tag}v$1"; }

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

# Starts a rank in host h's namespaces, in the background: start_rank SLOT HOST RANK LOCAL_RANK
# COMMAND...; the job has $world ranks, $per_host on each host. Its output goes to
# $work/rank$SLOT.log and its pid to pids[SLOT].
secret=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
port=$((20000 + $$ % 20000))
world=$nhosts
per_host=1
pids=()
master_addr=10.88.0.1
hosts_files=  # a folder: each host sees its hosts$h there as /etc/hosts
pick_ifname=1  # empty: the ranks choose their interfaces themselves
start_rank() {
  local slot=$1 h=$2 rank=$3 local_rank=$4
  shift 4
  local hosts=/etc/hosts
  [[ -n $hosts_files ]] && hosts=$hosts_files/hosts$h
  ip netns exec "${tag}h$h" unshare --uts --mount \
    sh -c 'hostname "$0" && { [ "$1" = /etc/hosts ] || mount --bind "$1" /etc/hosts; } && shift && exec "$@"' \
    "host$h" "$hosts" \
    env MASTER_ADDR=$master_addr MASTER_PORT=$port RANK=$rank WORLD_SIZE=$world LOCAL_RANK=$local_rank \
    LOCAL_WORLD_SIZE=$per_host WEFT_SECRET="$secret" WEFT_TIMEOUT_MS=$timeout_ms \
    ${pick_ifname:+WEFT_SOCKET_IFNAME="$(ifname_of "$h")"} "$@" > "$work/rank$slot.log" 2>&1 &
  pids[slot]=$!
}

show_logs() {
  local slot
  for slot in "${!pids[@]}"; do
    echo "--- rank $slot"
    cat "$work/rank$slot.log"
  done
}

now_ms() { date +%s%3N; }

# Waits for every rank; fails unless each exit status is in the wanted class (ok / error).
wait_all() {
  local want=$1 slot status bad=0
  for slot in "${!pids[@]}"; do
    status=0
    wait "${pids[slot]}" || status=$?
    if [[ $want == ok && $status != 0 ]] || [[ $want == error && $status == 0 ]]; then
      echo "rank $slot exited $status, wanted $want"
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
    for ((h = 0; h < nhosts; ++h)); do start_rank "$h" "$h" "$h" 0 "$bin/weft-stress" -i $iterations -s 5 -m 256K; done
    wait_all ok
    grep "weft-stress:" "$work/rank0.log"
    grep -q " 0 wrong, 0 out of bounds, 0 failed calls" "$work/rank0.log" || { show_logs; exit 1; }
    ;;
  weftrun)
    # One weftrun per host, as torchrun --nnodes: 3 hosts x 2 ranks, numbered by the launchers
    # (WEFT_SECRET from the caller's environment, the same everywhere).
    for ((h = 0; h < nhosts; ++h)); do
      start_rank "$h" "$h" "$h" 0 "$bin/weftrun" --nnodes $nhosts --node-rank "$h" --master-addr $master_addr \
        --master-port $port -n 2 --timeout 300 "$bin/weft-stress" -i 200 -s 9 -m 256K
    done
    wait_all ok
    grep "weft-stress:" "$work/rank0.log"
    grep -q "weft-stress: 6 ranks, .* 0 wrong, 0 out of bounds, 0 failed calls" "$work/rank0.log" || { show_logs; exit 1; }
    ;;
  hostname-root)
    # The root named by a host name that rank 0's host maps to a loopback address, as Debian's
    # /etc/hosts maps a host's own name to 127.0.1.1, while the other hosts map it to host 0's
    # address: rank 0 must listen where they can reach it.
    hosts_files=$work
    for ((h = 0; h < nhosts; ++h)); do
      address=10.88.0.1
      ((h == 0)) && address=127.0.1.1
      printf '127.0.0.1 localhost\n%s weft-root-host\n' "$address" > "$work/hosts$h"
    done
    # Two ranks a host, numbered across the hosts (rank h + 3l), and no WEFT_SOCKET_IFNAME: host
    # 0's rank 3, whose route to the root is loopback there, must listen where ranks 1 and 2
    # (lower, so they connect to it) reach it.
    master_addr=weft-root-host
    world=$((2 * nhosts))
    per_host=2
    pick_ifname=
    for ((h = 0; h < nhosts; ++h)); do
      for ((l = 0; l < per_host; ++l)); do
        start_rank $((h + nhosts * l)) "$h" $((h + nhosts * l)) "$l" "$bin/weft-stress" -i 20 -s 5 -m 64K
      done
    done
    wait_all ok
    grep -q " 0 wrong, 0 out of bounds, 0 failed calls" "$work/rank0.log" || { show_logs; exit 1; }
    ;;
  link-local)
    for ((h = 0; h < nhosts; ++h)); do
      ip -n "${tag}h$h" addr add "fe80::1$h/64" dev "${tag}v$h" nodad
    done
    pick_ifname=
    for ((h = 0; h < nhosts; ++h)); do
      master_addr="fe80::10%${tag}v$h"  # host 0's address, on each host's own link
      start_rank "$h" "$h" "$h" 0 "$bin/weft-stress" -i 20 -s 5 -m 64K
    done
    wait_all ok
    grep -q " 0 wrong, 0 out of bounds, 0 failed calls" "$work/rank0.log" || { show_logs; exit 1; }
    ;;
  plan)
    # Two ranks per host, numbered across the hosts (rank h + 3l), so that the planned ring (each
    # host's ranks together) and the double binary tree over hosts are not rank order. Every
    # collective with a ring or a tree runs forced to it, besides the tuner's own choices.
    world=$((2 * nhosts))
    per_host=2
    two_nics=$(cd "$(dirname "$0")" && pwd)/topo/server-2s.xml
    for topo in live "$two_nics"; do
      topo_env=()
      max=256K
      # Large enough that the ring all-reduce splits over the two channels' rings.
      [[ $topo != live ]] && topo_env=(WEFT_TOPO_FILE="$topo") && max=2M
      for algo in ring tree auto; do
        pids=()
        for ((h = 0; h < nhosts; ++h)); do
          for ((l = 0; l < per_host; ++l)); do
            algo_env=()
            [[ $algo != auto ]] && algo_env=(WEFT_ALGO=$algo)
            start_rank $((h + nhosts * l)) "$h" $((h + nhosts * l)) "$l" env "${algo_env[@]}" "${topo_env[@]}" \
              WEFT_DEBUG=INFO "$bin/weft-stress" -i 200 -s 7 -m "$max"
          done
        done
        wait_all ok
        echo "topology $(basename "$topo"), WEFT_ALGO=$algo: $(grep "weft-stress:" "$work/rank0.log")"
        grep -q " 0 wrong, 0 out of bounds, 0 failed calls" "$work/rank0.log" || { show_logs; exit 1; }
      done
      grep -m1 -A5 "plan:" "$work/rank0.log"
    done
    grep -q "plan: 6 rank(s) on 3 host(s), 2 channel(s)" "$work/rank0.log" ||
      { echo "server-2s.xml did not give two channels"; show_logs; exit 1; }
    grep -q "all-reduce of [0-9]* bytes on 6 ranks: ring over 2 channels" "$work/rank0.log" ||
      { echo "no all-reduce ran over both channels' rings"; show_logs; exit 1; }
    ;;
  rails)
    export WEFT_TOPO_FILE
    WEFT_TOPO_FILE=$(cd "$(dirname "$0")" && pwd)/topo/server-2s.xml
    for ((h = 0; h < nhosts; ++h)); do
      start_rank "$h" "$h" "$h" 0 env WEFT_DEBUG=INFO "$bin/weft-stress" -i 200 -s 8 -m 1M
    done
    wait_all ok
    grep "weft-stress:" "$work/rank0.log"
    grep -q " 0 wrong, 0 out of bounds, 0 failed calls" "$work/rank0.log" || { show_logs; exit 1; }
    grep -q "streams to .* on rails: 0:NIC 0->10.88.0.[0-9]*:[0-9]* 1:NIC 1->10.89.0" "$work/rank0.log" ||
      { echo "rank 0 did not put its streams on both rails"; show_logs; exit 1; }
    # A broken rail: host 0 routes the others' second rails nowhere. Its streams there must take
    # the peers' main addresses, with a warning, well within the timeout (they timed out before).
    for ((h = 1; h < nhosts; ++h)); do ip -n "${tag}h0" route add unreachable "10.89.0.$((h + 1))/32"; done
    pids=()
    t0=$(now_ms)
    for ((h = 0; h < nhosts; ++h)); do start_rank "$h" "$h" "$h" 0 "$bin/weft-stress" -i 50 -s 8 -m 64K; done
    wait_all ok
    echo "second rail of host 0 unreachable: $(grep "weft-stress:" "$work/rank0.log") in $(($(now_ms) - t0)) ms"
    grep -q " 0 wrong, 0 out of bounds, 0 failed calls" "$work/rank0.log" || { show_logs; exit 1; }
    grep -h "rail from NIC 1 .* failed" "$work/"rank*.log | head -3
    grep -q "rail from NIC 1 .* failed" "$work/rank0.log" ||
      { echo "rank 0 did not report its broken rail"; show_logs; exit 1; }
    for ((h = 1; h < nhosts; ++h)); do ip -n "${tag}h0" route del unreachable "10.89.0.$((h + 1))/32"; done
    tx() { ip netns exec "${tag}h$1" cat "/sys/class/net/$2/statistics/tx_bytes"; }
    # perf LABEL ENV...: a verified all-reduce on every host; prints the table, and fails unless
    # every host sent at least a quarter of its bytes by each link.
    perf() {
      local label=$1 h before0=() before1=() sent0 sent1
      shift
      for ((h = 0; h < nhosts; ++h)); do before0[h]=$(tx "$h" ens1f0); before1[h]=$(tx "$h" ens2f0); done
      pids=()
      for ((h = 0; h < nhosts; ++h)); do
        start_rank "$h" "$h" "$h" 0 env "$@" "$bin/weft-perf" allreduce -b 1M -e "${RAILS_MAX:-4M}" -f 4 -n 5 -w 1 -c 1
      done
      wait_all ok
      echo "--- $label"
      grep -E "^ +[0-9]+ " "$work/rank0.log"
      grep -q "Out of bounds values : 0 OK" "$work/rank0.log" || { show_logs; exit 1; }
      for ((h = 0; h < nhosts; ++h)); do
        sent0=$(($(tx "$h" ens1f0) - before0[h]))
        sent1=$(($(tx "$h" ens2f0) - before1[h]))
        echo "host $h sent $sent0 bytes by ens1f0, $sent1 by ens2f0"
        if [[ $label == "two rails" ]] && ((4 * sent0 < sent0 + sent1 || 4 * sent1 < sent0 + sent1)); then
          echo "host $h did not spread its bytes over both rails"
          show_logs
          exit 1
        fi
      done
    }
    for ((h = 0; h < nhosts; ++h)); do
      for itf in ens1f0 ens2f0; do
        ip netns exec "${tag}h$h" tc qdisc add dev "$itf" root tbf rate "${RAILS_RATE:-100mbit}" burst 64kb latency 500ms
      done
    done
    echo "links: tbf ${RAILS_RATE:-100mbit} each"
    perf "two rails"
    perf "one rail, 2 streams" WEFT_SOCKET_IFNAME==ens1f0 WEFT_SOCKET_NSTREAMS=2
    ;;
  linkdown | kill)
    for ((h = 0; h < nhosts; ++h)); do start_rank "$h" "$h" "$h" 0 "$bin/weft-stress" -t 120 -s 6 -m 1M; done
    sleep 3  # well into the run
    t0=$(now_ms)
    if [[ $mode == linkdown ]]; then
      ip -n "${tag}h2" link set "${tag}v2" down
      echo "link of host 2 down"
    else
      kill -9 "${pids[1]}"
      echo "rank 1 killed"
    fi
    # weft-stress prints weftGetErrorString's text: weftRemoteError's; after a link went down,
    # weftTimeout's too (nothing hung up there: the peers fell silent).
    reported_failure() {
      grep -q ": remote process exited or there was a network error: " "$1" && return 0
      [[ $mode == linkdown ]] && grep -q "^weft-stress: rank [0-9]*: .*: timed out: " "$1"
    }
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
      elif ! reported_failure "$work/rank$h.log"; then
        echo "rank $h reported neither weftRemoteError$([[ $mode == linkdown ]] && echo " nor weftTimeout")"
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
