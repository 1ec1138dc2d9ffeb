#!/usr/bin/env bash
# tools/setup.sh: installs the Debian packages Weft's build, tests and benchmarks need (only
# those missing), then configures and builds the tree. Safe to run again: it does nothing that
# is already done beyond an incremental build.
#
#   tools/setup.sh [--build-dir DIR] [--no-install] [-- extra cmake args]
#
# Environment: BUILD_DIR (default <repo>/build), WEFT_SETUP_NO_INSTALL=1 (skip apt-get).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}
install=1
[[ ${WEFT_SETUP_NO_INSTALL:-0} == 1 ]] && install=0
cmake_args=()
while (($#)); do
  case $1 in
    --build-dir) build_dir=$2; shift 2 ;;
    --no-install) install=0; shift ;;
    --) shift; cmake_args=("$@"); break ;;
    -h | --help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "setup: unknown argument '$1'" >&2; exit 2 ;;
  esac
done

# What each package is for:
#   build-essential cmake pkg-config  the build
#   catch2                            the test suite (Catch2 v2, Debian's)
#   libbenchmark-dev                  kernel microbenchmarks (Google Benchmark)
#   libgloo-dev                       bench/compare's peer (Gloo's ring all-reduce)
#   openmpi-bin libopenmpi-dev        weft-perf under mpirun (tests), Open MPI as bench/compare's peer
#   python3                           bench/compare's table
#   iproute2 procps                   multi-host tests (network namespaces), process checks
#   libhwloc-dev                      topology discovery (src/topo)
#   clang libclang-rt-14-dev          libFuzzer builds of tests/fuzz (tools/fuzz.sh, .ci/run)
#   python3-torch libtorch-dev        the torch.distributed backend (python/) and the C++ DDP example
#   libopenblas0-serial               their BLAS: without it libblas.so.3 is the unoptimized reference
#                                     BLAS (the training benchmarks' test pass took minutes); serial, as
#                                     each rank keeps to one thread (torch.set_num_threads(1))
#   pybind11-dev python3-dev          ... its Python module
#   python3-pip python3-setuptools    ... and `pip install ./python` (the README's other route,
#   python3-venv                      tested by ctest in a venv that sees Debian's torch)
#   zlib1g-dev dataset-fashion-mnist  the training examples' data (gzip'd IDX files)
#   hipcc libamdhip64-dev             the HIP variant of the GPU path (CUDA, when present, is
#                                     /usr/local/cuda: NVIDIA's, not a Debian package)
packages=(build-essential cmake pkg-config catch2 libbenchmark-dev libgloo-dev openmpi-bin libopenmpi-dev python3
  iproute2 procps libhwloc-dev clang libclang-rt-14-dev python3-torch libtorch-dev libopenblas0-serial pybind11-dev
  python3-dev python3-pip python3-setuptools python3-venv zlib1g-dev dataset-fashion-mnist hipcc libamdhip64-dev)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  if ((install)); then
    sudo=()
    if [[ $(id -u) != 0 ]]; then
      command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
      sudo=(sudo)
    fi
    echo "setup: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get update -qq
    "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "setup: missing Debian packages (not installing): ${missing[*]}" >&2
  fi
fi

jobs=$(nproc 2>/dev/null || echo 2)
# Configured every time (cheap when nothing changed): a first configure that failed or was cut
# short, or packages installed since, must not leave a stale cache behind.
if [[ ! -f $build_dir/CMakeCache.txt ]]; then
  cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release "${cmake_args[@]}"
else
  cmake -S "$root" -B "$build_dir" "${cmake_args[@]}"
fi
cmake --build "$build_dir" -j "$jobs"
