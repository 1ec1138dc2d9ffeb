#!/usr/bin/env bash
# tools/check-torch-pip.sh BUILD_DIR [TORCH]: the torch backend against a torch from PyPI (torch 2.x,
# c10d::Backend) instead of Debian's 1.13. Installs TORCH (a pip requirement, default "torch": the
# newest) into a venv kept at $WEFT_TORCH_VENV (default $TMPDIR/weft-torch-pip; the first run
# downloads about 5 GB), installs BUILD_DIR's Weft into a scratch prefix, builds weft_torch with
# `pip install ./python` against both, and runs the backend's Python tests with it: every operation
# on 2 and 3 ranks, DDP against one process, the shared-memory CPU allocator, a dying rank, the
# example's 60 steps, and the CUDA tensor test (which says SKIPPED without a GPU). Not part of
# ctest: it needs the network.
set -euo pipefail
build=$(cd "${1:?usage: check-torch-pip.sh BUILD_DIR [TORCH]}" && pwd)
spec=${2:-torch}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${WEFT_TORCH_VENV:-${TMPDIR:-/tmp}/weft-torch-pip}
work=$(mktemp -d "${TMPDIR:-/tmp}/weft-torch-pip.XXXXXX")
trap 'rm -rf "$work"' EXIT

[[ -x $venv/bin/python ]] || python3 -m venv "$venv"
"$venv/bin/pip" install -q "$spec" numpy setuptools wheel
echo "check-torch-pip: torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)' 2>/dev/null)"

prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
cp -r "$root/python" "$work/python"  # pip builds in the tree it is given
(cd "$work/python" && WEFT_PREFIX=$prefix "$venv/bin/pip" install -q --no-build-isolation --no-deps \
  --target "$work/site" .)
export PYTHONPATH=$work/site LD_LIBRARY_PATH=$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
weftrun=$prefix/bin/weftrun
py=$venv/bin/python

cd "$work"
for n in 2 3; do
  "$weftrun" -n "$n" --timeout 300 env WEFT_TEST_STORE="$work/store-$n" "$py" "$root/tests/torch/backend_test.py"
done
"$weftrun" -n 2 --timeout 300 env WEFT_TEST_CHECKPOINT="$work/ckpt.pt" "$py" "$root/tests/torch/ddp_test.py"
"$weftrun" -n 2 --timeout 300 "$py" "$root/tests/torch/shared_memory_test.py"
"$weftrun" -n 2 --timeout 300 "$py" "$root/tests/torch/shared_memory_test.py" --rank1-off
"$py" "$root/tests/torch/ddp_test.py" --fault
"$weftrun" -n 2 --timeout 300 "$py" "$root/examples/ddp/train_fashion_mnist.py" --backend weft --max-steps 60 \
  --save "$work/model.pt" | tee "$work/train.log"
grep -q 'weights equal on every rank: yes' "$work/train.log"
"$weftrun" -n 2 --timeout 300 "$py" "$root/tests/torch/cuda_test.py"
echo "check-torch-pip: passed with torch $("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null)"
