#!/usr/bin/env bash
# Builds the libFuzzer targets in build-fuzz/ (clang, ASan + UBSan) and fuzzes each for SECONDS
# (default 30), starting from the seed corpus in tests/fuzz/corpus/. New inputs go to a scratch
# corpus, crashes to build-fuzz/crashes/. Exit 0: no crash; 1: a target crashed; 77: skipped
# (no clang with libFuzzer: Debian packages clang and libclang-rt-14-dev).
#   tools/fuzz.sh [SECONDS] [TARGET...]      e.g. tools/fuzz.sh 3600 socket_stream
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
shift || true
targets=("$@")
if ((${#targets[@]} == 0)); then
  targets=(unique_id bootstrap socket_stream shm_ring)
fi

probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' > "$probe/p.cc"
if ! command -v clang++ > /dev/null || ! clang++ -fsanitize=fuzzer "$probe/p.cc" -o "$probe/p" 2> /dev/null; then
  echo "fuzz: skipped: clang++ with libFuzzer is not installed (apt-get install clang libclang-rt-14-dev)"
  exit 77
fi

cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DWEFT_FUZZ=ON -DWEFT_SANITIZE=address,undefined > /dev/null
cmake --build build-fuzz -j2 --target "${targets[@]/#/fuzz_}" > /dev/null
mkdir -p build-fuzz/crashes
status=0
for target in "${targets[@]}"; do
  mkdir -p "$probe/$target"
  echo "fuzz: $target for ${seconds}s"
  set +e
  UBSAN_OPTIONS=halt_on_error=1 "build-fuzz/bin/fuzz_$target" -max_total_time="$seconds" -timeout=10 \
    -artifact_prefix=build-fuzz/crashes/"$target"- -print_final_stats=1 \
    "$probe/$target" "tests/fuzz/corpus/$target" 2>&1 | grep -E "^(stat::number_of_executed_units|==[0-9]+==ERROR|SUMMARY)|Done"
  fuzzer_status=${PIPESTATUS[0]}
  set -e
  # A crash leaves an artifact; a fuzzer that fails without one (at start-up) fails the run too.
  if ls build-fuzz/crashes/"$target"-* > /dev/null 2>&1; then
    echo "fuzz: $target CRASHED: see build-fuzz/crashes/"
    status=1
  elif ((fuzzer_status != 0)); then
    echo "fuzz: fuzz_$target exited with status $fuzzer_status"
    status=1
  fi
done
exit "$status"
