#!/usr/bin/env bash
# bench/ddp_compare.sh: PyTorch DDP training on 2 CPU ranks with backend "weft" beside "gloo", in
# one run: one epoch of the seed CNN on Fashion-MNIST (accuracy and time), then STEPS steps of a
# 20M-parameter MLP (communication bound) with each backend and with no exchange at all (the
# floor both share: DDP's hook keeps each rank's own gradients), then the C++ example's epoch. Records
# bench/results/YYYY-MM-DD-ddp-vs-gloo.md.   Usage: bench/ddp_compare.sh [STEPS]   (BUILD_DIR)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
steps=${1:-60}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
py=/usr/bin/python3
script=$root/examples/ddp/train_fashion_mnist.py
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
run() {  # name, then the command
  local name=$1
  shift
  echo "== $name: $*" | sed "s|$root|.|g"
  (cd "$work" && "$@") | tee "$work/$name.log" | tail -1
}
cmds=()
for model_steps in "cnn:-1" "mlp:$steps"; do
  model=${model_steps%%:*}
  max=${model_steps##*:}
  for backend in gloo weft; do
    cmd=(env PYTHONPATH="$build/python" "$build/bin/weftrun" -n 2 --timeout 1800 "$py" "$script" --backend "$backend"
      --model "$model" --max-steps "$max" --save "$work/$backend.pt")
    if [[ $model == mlp ]]; then
      cmd+=(--batch 2)  # little compute per step: the 80 MB all-reduce dominates
    fi
    cmds+=("${cmd[*]}")
    run "$model-$backend" "${cmd[@]}"
  done
done
cmd=(env PYTHONPATH="$build/python" "$build/bin/weftrun" -n 2 --timeout 1800 "$py" "$script" --backend gloo
  --model mlp --max-steps "$steps" --batch 2 --no-exchange --save "$work/floor.pt")
cmds+=("${cmd[*]}")
run "mlp-floor" "${cmd[@]}"
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
| 20M-parameter MLP, batch 2, $steps steps, gloo | $(result mlp-gloo) |
| 20M-parameter MLP, batch 2, $steps steps, weft | $(result mlp-weft) |
| 20M-parameter MLP, batch 2, $steps steps, no exchange (the floor) | $(result mlp-floor) |
| C++ example (libtorch + weft DDP layer), 1 epoch | $(result cc-weft) |
TXT
)
echo "$summary"
out=$root/bench/results/$(date +%F)-ddp-vs-gloo.md
{
  echo "# PyTorch DDP on 2 CPU ranks: backend weft vs gloo, $(date +%F)"
  echo
  echo "Machine: $(uname -n), $(nproc) CPUs ($(lscpu | sed -n 's/^Model name: *//p')); load average before $load_before, after $load_after."
  echo "Weft revision: $(git -C "$root" describe --always --dirty). Command: bench/ddp_compare.sh $steps."
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
