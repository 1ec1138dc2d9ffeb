#!/usr/bin/env bash
# tools/check-install.sh BUILD_DIR: installs the build into a scratch prefix and builds the
# README's example against it through pkg-config and through CMake's find_package, each against
# libweft.so and libweft.a (and libweft.a from a project that enables only C), then runs all
# five on 3 ranks under the installed weftrun and checks the average they print.
set -euo pipefail
build=$(cd "${1:?usage: check-install.sh BUILD_DIR}" && pwd)
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/weft-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

cmake --install "$build" --prefix "$prefix" >/dev/null
libdir=$(dirname "$(find "$prefix" -name weft.pc | head -1)")/..
for f in include/weft/weft.h bin/weftrun bin/weft-perf; do
  [[ -e $prefix/$f ]] || { echo "check-install: $f was not installed" >&2; exit 1; }
done

# pkg-config
PKG_CONFIG_PATH=$libdir/pkgconfig cc -std=c11 -Wall -Werror -o "$work/example-pc" \
  "$root/examples/c/allreduce.c" $(PKG_CONFIG_PATH=$libdir/pkgconfig pkg-config --cflags --libs weft)

# pkg-config, static: libweft.a with what --static says it needs (the C++ runtime, hwloc, and
# the GPU runtime of a GPU build)
static_libs=$(PKG_CONFIG_PATH=$libdir/pkgconfig pkg-config --static --libs weft | sed 's/-lweft\b/-l:libweft.a/')
PKG_CONFIG_PATH=$libdir/pkgconfig cc -std=c11 -Wall -Werror -o "$work/example-pc-static" \
  "$root/examples/c/allreduce.c" $(PKG_CONFIG_PATH=$libdir/pkgconfig pkg-config --cflags weft) $static_libs

# CMake package, shared and static
mkdir -p "$work/consumer"
cat > "$work/consumer/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.20)
project(consumer C CXX)
find_package(Weft REQUIRED)
add_executable(example-cmake $root/examples/c/allreduce.c)
target_link_libraries(example-cmake Weft::weft)
add_executable(example-cmake-static $root/examples/c/allreduce.c)
target_link_libraries(example-cmake-static Weft::weft_static)
CMAKE
cmake -S "$work/consumer" -B "$work/consumer/build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/consumer/build" >/dev/null

# CMake package, static, from a project that enables C alone (linked by the C compiler)
mkdir -p "$work/consumer-c"
cat > "$work/consumer-c/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.20)
project(consumer_c C)
find_package(Weft REQUIRED)
add_executable(example-cmake-c-static $root/examples/c/allreduce.c)
target_link_libraries(example-cmake-c-static Weft::weft_static)
CMAKE
cmake -S "$work/consumer-c" -B "$work/consumer-c/build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/consumer-c/build" >/dev/null

for exe in "$work/example-pc" "$work/example-pc-static" "$work/consumer/build/example-cmake" \
  "$work/consumer/build/example-cmake-static" "$work/consumer-c/build/example-cmake-c-static"; do
  out=$(LD_LIBRARY_PATH=$libdir "$prefix/bin/weftrun" -n 3 "$exe")
  # ranks 0, 1, 2 contribute 0, 1, 2: the average is 1
  if [[ $out != "avg of ranks: 1 over 3 ranks" ]]; then
    echo "check-install: $exe printed '$out'" >&2
    exit 1
  fi
done
echo "check-install: pkg-config and find_package(Weft) builds, shared and static (static from a C-only project too), ran on 3 ranks"
