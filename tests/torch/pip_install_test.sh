#!/usr/bin/env bash
# The README's pip route, against the build tree: `PKG_CONFIG_PATH=BUILD pip install
# --no-build-isolation ./python` in a venv that sees Debian's torch (BUILD's weft-uninstalled.pc
# points pkg-config at the build). The module it installs, not build/python's, must register
# backend "weft", report the libweft it loaded as __version__ (weft.h's), and all-reduce on 2
# ranks under weftrun.
#   Usage: pip_install_test.sh BUILD_DIR SOURCE_DIR PYTHON
set -euo pipefail
build=$1 root=$2 python=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$python" -m venv --system-site-packages "$work/venv"
cp -r "$root/python" "$work/python"  # pip builds in the tree it is given
(cd "$work/python" && PKG_CONFIG_PATH=$build "$work/venv/bin/pip" install -q --no-build-isolation --no-deps \
  --target "$work/site" .)
want=$(sed -n 's/^#define WEFT_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\).*/\2/p' "$root/include/weft/weft.h" | paste -sd.)
cat > "$work/check.py" <<'PY'
import os
import sys

import torch
import torch.distributed as dist

import weft_torch

site, want = sys.argv[1], sys.argv[2]
assert weft_torch.__file__.startswith(site), f"imported {weft_torch.__file__}, not the installed module"
assert weft_torch.__version__ == want, f"__version__ {weft_torch.__version__}, weft.h says {want}"
dist.init_process_group("weft")
t = torch.full((1000,), float(dist.get_rank() + 1))
dist.all_reduce(t)
assert torch.all(t == 3), t[:4]
dist.destroy_process_group()
print(f"rank {os.environ['RANK']}: the pip-installed weft_torch {want} all-reduced")
PY
cd "$work"
env -u PYTHONPATH PYTHONPATH="$work/site" "$build/bin/weftrun" -n 2 --timeout 120 \
  "$work/venv/bin/python" check.py "$work/site" "$want"
