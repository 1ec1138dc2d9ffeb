#!/usr/bin/env bash
# bench/ddp_compare.sh: PyTorch DDP training on 2 CPU ranks with backend "weft" beside "gloo", in
# one run: one epoch of the seed CNN on Fashion-MNIST (accuracy and time); then ROUNDS rounds of
# STEPS steps of a 20M-parameter MLP (communication bound), each round taking turns between weft,
# gloo and no exchange at all (the floor both share: DDP's hook keeps each rank's own gradients),
# so that a noisy machine's slow spells fall on all three alike; and two runs that say where weft's
# lead comes from: weft with its CPU allocator off (WEFT_TORCH_SHARED_MEMORY=0: its tensors in
# ordinary memory), and no exchange under weft's allocator (the floor of a step without gloo's
# fresh page faults); then the C++ example's epoch.
# cpu-pair-latency reads the machine's speed before each MLP run and after each round: some VMs
# switch between two speeds every few minutes, so the script also gives the median over the
# rounds whose weft and gloo runs kept one speed (their readings within 1.5x of each other).
# Records bench/results/YYYY-MM-DD-ddp-vs-gloo.md (-2, -3, ... where the day has one already).
#   Usage: bench/ddp_compare.sh [STEPS [ROUNDS]]   (defaults 60 and 3; BUILD_DIR)
set -euo pipefail
usage() {
  cat <<'EOF'
Usage: bench/ddp_compare.sh [STEPS [ROUNDS]]
  STEPS   steps of the 20M-parameter MLP in each of its runs (default 60)
  ROUNDS  rounds of the MLP runs, each taking turns between weft, gloo and no exchange (default 3)
Records bench/results/YYYY-MM-DD-ddp-vs-gloo.md (-2, -3, ... where the day has one already).
Environment: BUILD_DIR (default: <repo>/build)
EOF
}
# Before any run: a bad argument would otherwise start the benchmark, or record a run of no rounds.
case ${1:-} in
  -h | --help) usage; exit 0 ;;
esac
if (($# > 2)); then
  echo "ddp_compare: at most 2 arguments (STEPS ROUNDS), got $#" >&2
  usage >&2
  exit 2
fi
steps=${1-60}
rounds=${2-3}
for arg in "STEPS=$steps" "ROUNDS=$rounds"; do
  if ! [[ ${arg#*=} =~ ^[1-9][0-9]{0,8}$ ]]; then
    echo "ddp_compare: ${arg%%=*} must be a whole number from 1 to 999999999, not '${arg#*=}'" >&2
    usage >&2
    exit 2
  fi
done
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
py=/usr/bin/python3
script=$root/examples/ddp/train_fashion_mnist.py
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
blas=$(readlink -f "$(/sbin/ldconfig -p | awk '/libblas\.so\.3 /{print $NF; exit}')" 2>/dev/null || echo unknown)
run() {  # name, then the command
  local name=$1
  shift
  echo "== $name: $*" | sed "s|$root|.|g"
  (cd "$work" && "$@") | tee "$work/$name.log" | tail -1
}
example() {  # backend, model, then more of the example's arguments
  local backend=$1 model=$2
  shift 2
  echo env PYTHONPATH="$build/python" "$build/bin/weftrun" -n 2 --timeout 1800 "$py" "$script" --backend "$backend" \
    --model "$model" "$@"
}
speed() {  # the median cache-line round trip between two CPUs over 0.5 s, in ns ("-": unreadable)
  local line
  line=$("$build/bin/cpu-pair-latency" --seconds 0.5 2>/dev/null) || { echo -; return; }
  [[ $line =~ median\ ([0-9]+) ]] && echo "${BASH_REMATCH[1]}" || echo -
}
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
step_ms() { sed -n 's/.*(\([0-9.]*\) ms a step.*/\1/p' "$work/$1.log"; }
cmds=()
for backend in gloo weft; do
  read -ra cmd <<<"$(example "$backend" cnn --max-steps -1 --save "$work/$backend.pt")"
  cmds+=("${cmd[*]}")
  run "cnn-$backend" "${cmd[@]}"
done
# The MLP at batch 2: little compute per step, so the 80 MB all-reduce weighs.
declare -A mlp=(
  [weft]="$(example weft mlp --max-steps "$steps" --batch 2 --save "$work/weft.pt")"
  [gloo]="$(example gloo mlp --max-steps "$steps" --batch 2 --save "$work/gloo.pt")"
  [floor]="$(example gloo mlp --max-steps "$steps" --batch 2 --no-exchange --save "$work/floor.pt")"
  [unshared]="$(example weft mlp --max-steps "$steps" --batch 2 --save "$work/unshared.pt" |
    sed 's/^env /env WEFT_TORCH_SHARED_MEMORY=0 /')"
  [weftfloor]="$(example weft mlp --max-steps "$steps" --batch 2 --no-exchange --save "$work/weftfloor.pt")"
)
cmds+=("${mlp[weft]}" "${mlp[gloo]}" "${mlp[floor]}" "${mlp[unshared]}" "${mlp[weftfloor]}")
rows=()
ratios=()
steady=()
for ((r = 1; r <= rounds; r++)); do
  readings=()
  for kind in weft gloo floor unshared weftfloor; do
    readings+=("$(speed)")
    read -ra cmd <<<"${mlp[$kind]}"
    run "mlp-$kind-$r" "${cmd[@]}"
  done
  readings+=("$(speed)")
  w=$(step_ms "mlp-weft-$r") g=$(step_ms "mlp-gloo-$r") f=$(step_ms "mlp-floor-$r") u=$(step_ms "mlp-unshared-$r")
  wf=$(step_ms "mlp-weftfloor-$r")
  ratio=$(awk -v w="$w" -v g="$g" 'BEGIN { printf "%.3f", w / g }')
  ratios+=("$ratio")
  # Steady: the readings around the weft and gloo runs (the first three) there and within 1.5x
  # of each other; the ratio rests on those two runs.
  if awk -v list="${readings[*]:0:3}" 'BEGIN { n = split(list, v, " "); lo = hi = v[1] + 0
         for (i = 1; i <= n; i++) { if (v[i] == "-") exit 1; lo = v[i] < lo ? v[i] : lo; hi = v[i] > hi ? v[i] : hi }
         exit !(hi <= 1.5 * lo) }'; then
    steady+=("$ratio")
    kept=yes
  else
    kept=no
  fi
  rows+=("$(awk -v r="$r" -v w="$w" -v g="$g" -v f="$f" -v u="$u" -v wf="$wf" -v q="$ratio" -v s="${readings[*]}" \
    -v k="$kept" 'BEGIN { printf "| %d | %s | %s | %s | %s | %.1f | %.1f | %s | %.3f | %s | %.1f | %s | %s |",
                          r, w, g, f, q, w - f, g - f, u, u / g, wf, w - wf, s, k }')")
done
median=$(printf '%s\n' "${ratios[@]}" | median)
steady_median=$(printf '%s\n' ${steady[@]+"${steady[@]}"} | sed '/^$/d' | median)
cmd=("$build/bin/weftrun" -n 2 --timeout 1800 "$build/bin/train_fashion_mnist" --save "$work/cc.pt")
cmds+=("${cmd[*]}")
run "cc-weft" "${cmd[@]}"
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

result() { tail -1 "$work/$1.log"; }
summary=$(cat <<TXT
| run | result |
| --- | --- |
| seed CNN, 1 epoch, gloo | $(result cnn-gloo) |
| seed CNN, 1 epoch, weft | $(result cnn-weft) |
| 20M-parameter MLP, batch 2, $steps steps, gloo (round 1) | $(result mlp-gloo-1) |
| 20M-parameter MLP, batch 2, $steps steps, weft (round 1) | $(result mlp-weft-1) |
| 20M-parameter MLP, batch 2, $steps steps, no exchange (round 1) | $(result mlp-floor-1) |
| 20M-parameter MLP, batch 2, $steps steps, weft with WEFT_TORCH_SHARED_MEMORY=0 (round 1) | $(result mlp-unshared-1) |
| 20M-parameter MLP, batch 2, $steps steps, no exchange under weft's allocator (round 1) | $(result mlp-weftfloor-1) |
| C++ example (libtorch + weft DDP layer), 1 epoch | $(result cc-weft) |

The MLP, milliseconds a step (the slowest rank's), rounds in turn:

| round | weft | gloo | no exchange (floor) | weft / gloo | weft - floor | gloo - floor | weft, tensors not shared | that / gloo | no exchange, weft's allocator | weft - that | cpu-pair-latency (ns): before weft, gloo, floor, not shared, weft's floor; after | weft and gloo at one speed |
|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|
$(printf '%s\n' "${rows[@]}")

Median weft / gloo over $rounds rounds: **$median**; over the ${#steady[@]} rounds at one speed: **$steady_median** (issue 7's target: at most 0.7).
TXT
)
echo "$summary"
out=$root/bench/results/$(date +%F)-ddp-vs-gloo.md
n=1
while [[ -e $out ]]; do out=$root/bench/results/$(date +%F)-ddp-vs-gloo-$((++n)).md; done  # keep earlier records
{
  echo "# PyTorch DDP on 2 CPU ranks: backend weft vs gloo, $(date +%F)"
  echo
  echo "Machine: $(uname -n), $(nproc) CPUs ($(lscpu | sed -n 's/^Model name: *//p')); load average before $load_before, after $load_after."
  echo "Weft revision: $(git -C "$root" describe --always --dirty). Command: bench/ddp_compare.sh $steps $rounds. torch's BLAS: $blas."
  echo "Each run: weftrun -n 2, torch.set_num_threads(1) per rank, SGD lr 0.05 momentum 0.9, batch 64 per rank (MLP: 2);"
  echo "training time is the slowest rank's, data loading and the test pass excluded."
  echo
  echo "$summary"
  echo
  echo "Commands (\$WORK is a scratch directory):"
  echo
  echo '```'
  for c in "${cmds[@]}"; do echo "$c" | sed "s|$root|.|g; s|$work|\$WORK|g"; done
  echo '```'
} > "$out"
echo "recorded $out"
