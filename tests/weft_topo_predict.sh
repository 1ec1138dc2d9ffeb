#!/usr/bin/env bash
# weft-topo --predict prices every all-reduce algorithm as a communicator on this machine does:
# the same layout and the same pipeline chunk (bench/tuner_accuracy.py takes its defaults-mode
# predictions from the tool, so a difference would mis-score the model). For 2 and 4 ranks over
# shared memory and 2 over sockets, each size's "ring", "tree", ... from the tool must equal,
# to the INFO line's 0.1 us, what the ranks logged at WEFT_DEBUG=INFO for that size.
#   weft_topo_predict.sh BIN_DIR
set -euo pipefail
bin=$1
bench=$(cd "$(dirname "${BASH_SOURCE[0]}")/../bench" && pwd)  # tuner_accuracy.py reads the INFO lines
work=$(mktemp -d "${TMPDIR:-/tmp}/weft-predict.XXXXXX")
trap 'rm -rf "$work"' EXIT

check() {  # ranks, transport (shm|socket), then weft-topo's extra flags
  local n=$1 transport=$2
  shift 2
  "$bin/weft-topo" --predict "$n" "$@" > "$work/tool" ||
    { echo "weft-topo --predict $n $* failed"; exit 1; }
  WEFT_DEBUG=INFO WEFT_TRANSPORT=$transport WEFT_TUNE=defaults "$bin/weftrun" -n "$n" --timeout 120 \
    "$bin/weft-perf" allreduce -b 8 -e 4M -f 16 -n 1 -w 0 -c 0 > "$work/ranks" 2>&1 ||
    { echo "weft-perf on $n ranks ($transport) failed:"; cat "$work/ranks"; exit 1; }
  if grep -qE "stay on the executor|no shared-memory arena" "$work/ranks"; then
    # The tool assumes the shared-memory arena that one host's ranks normally set up.
    echo "the ranks could not set up the shared-memory arena (is /dev/shm small?): skipped"
    exit 77
  fi
  # "all-reduce of B bytes in 4-byte elements on N ranks, predicted: ring 12.1 us, ..." against
  # {"nranks": N, "size": B, "ring": 12.061, "tree": 12.954, ...}.
  PYTHONPATH=$bench python3 - "$work/tool" "$work/ranks" "$n $transport" <<'EOF'
import json, sys
from tuner_accuracy import logged_predictions
tool = {row["size"]: row for row in map(json.loads, open(sys.argv[1]))}
logged, sizes = 0, set()
for size, prices in logged_predictions(open(sys.argv[2]).read()).items():
    if size not in tool:
        continue
    for name, us in prices.items():
        if abs(us - tool[size][name]) > 0.051:
            sys.exit(f"{sys.argv[3]}: {size} bytes: the ranks predicted {name} {us} us, weft-topo {tool[size][name]:.3f}")
        logged += 1
    sizes.add(size)
# 8 B to 512 KiB by 16x: every algorithm at 5 sizes, 512 KiB past the 128 KiB shm chunk.
if logged < 16 or 524288 not in sizes:
    sys.exit(f"{sys.argv[3]}: only {logged} predictions logged at WEFT_DEBUG=INFO, for sizes {sorted(sizes)}")
print(f"{sys.argv[3]}: {logged} predictions agree")
EOF
}

check 2 shm
check 4 shm
check 2 socket --socket
