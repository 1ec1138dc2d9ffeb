#include "gpu/gpu_ranks.h"

#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "element_codec.h"

namespace weft::test {
namespace {

constexpr int kNoGpu = 77;

// Asked in a child: a parent that touched the runtime could not fork working ranks. Skipped
// only where there is no GPU (no driver, or no device); a driver too old for this runtime, or
// any other error, fails loudly instead of skipping.
int probeGpu(RankContext&) {
#if !defined(WEFT_GPU_HIP)
  if (dlopen("libcuda.so.1", RTLD_NOW) == nullptr) return kNoGpu;
#endif
  int count = 0;
  const gpuError_t err = gpuGetDeviceCount(&count);
  if (err == gpuErrorNoDevice || (err == gpuSuccess && count == 0)) return kNoGpu;
  if (err != gpuSuccess) {
    std::fprintf(stderr, "the GPU runtime fails: %s\n", gpuGetErrorString(err));
    return 1;
  }
  return 0;
}

// Small integers, so that every format holds every input, partial sum and product exactly.
double randomValue(std::mt19937_64& rng, weftDataType_t t, weftRedOp_t op) {
  const bool isSigned = isSignedType(t) || isFloatType(t);
  auto pick = [&](int lo, int hi) { return static_cast<double>(std::uniform_int_distribution<int>(lo, hi)(rng)); };
  if (!isFloatType(t) && (op == weftSum || op == weftMax || op == weftMin)) {  // full width: wraps and extremes
    return static_cast<double>(static_cast<int64_t>(rng() >> (isSigned ? 12 : 11)) * (isSigned && rng() % 2 ? -1 : 1));
  }
  if (op == weftProd) return isSigned ? pick(-2, 2) : pick(0, 2);
  if (op == weftMax || op == weftMin) return isSigned ? pick(-8, 8) : pick(0, 8);
  return isSigned ? pick(-2, 2) : pick(0, 3);
}

}  // namespace

void skipWithoutGpu() {
  auto outcome = runRanks(1, probeGpu, LaunchOptions{false, 60000});
  if (outcome.at(0).exitCode == 0) return;
  if (outcome.at(0).exitCode != kNoGpu) FAIL("GPU present but unusable: " << outcome.at(0).output);
  std::printf("SKIPPED: no GPU visible to this process (the GPU tests need CUDA or HIP hardware)\n");
  std::fflush(stdout);
  std::_Exit(kNoGpu);
}

uint64_t runSeed() {
  static const uint64_t seed = std::random_device{}();
  return seed;
}

std::vector<double> inputOf(int rank, int caseIndex, size_t count, weftDataType_t t, weftRedOp_t op) {
  std::mt19937_64 rng(runSeed() * 1000003 + static_cast<uint64_t>(caseIndex) * 64 + static_cast<uint64_t>(rank));
  std::vector<double> values(count);
  for (double& v : values) v = randomValue(rng, t, op);
  return values;
}

std::vector<unsigned char> encode(const std::vector<double>& values, weftDataType_t t) {
  std::vector<unsigned char> bytes(values.size() * typeSize(t));
  for (size_t i = 0; i < values.size(); ++i) storeValue(bytes.data(), i, t, values[i]);
  return bytes;
}

double rounded(double x, weftDataType_t t) {
  unsigned char bytes[8];
  storeValue(bytes, 0, t, x);
  return loadFloat(bytes, 0, t);
}

void reference(void* out, size_t at, const std::vector<std::vector<double>>& in, size_t i, weftDataType_t t,
               weftRedOp_t op, const std::function<double(int)>& scale) {
  const int n = static_cast<int>(in.size());
  if (isFloatType(t)) {
    double acc = rounded(in[0][i] * scale(0), t);
    for (int r = 1; r < n; ++r) {
      const double v = rounded(in[static_cast<size_t>(r)][i] * scale(r), t);
      acc = op == weftProd ? acc * v : op == weftMax ? std::max(acc, v) : op == weftMin ? std::min(acc, v) : acc + v;
    }
    if (op == weftAvg) acc = t == weftFloat64 ? acc / n : static_cast<double>(static_cast<float>(acc) / static_cast<float>(n));
    storeValue(out, at, t, acc);
    return;
  }
  const uint64_t mask = widthMask(t);
  const int bits = static_cast<int>(8 * typeSize(t));
  auto signedOf = [&](uint64_t x) { return bits == 64 ? static_cast<int64_t>(x) : static_cast<int64_t>(x << (64 - bits)) >> (64 - bits); };
  auto raw = [&](size_t r) {
    return static_cast<uint64_t>(static_cast<int64_t>(in[r][i])) * static_cast<uint64_t>(scale(static_cast<int>(r))) & mask;
  };
  uint64_t acc = raw(0);
  for (size_t r = 1; r < in.size(); ++r) {
    const uint64_t v = raw(r);
    if (op == weftProd) acc = acc * v & mask;
    else if (op == weftMax) acc = isSignedType(t) ? (signedOf(v) > signedOf(acc) ? v : acc) : std::max(acc, v);
    else if (op == weftMin) acc = isSignedType(t) ? (signedOf(v) < signedOf(acc) ? v : acc) : std::min(acc, v);
    else acc = (acc + v) & mask;
  }
  if (op == weftAvg) acc = isSignedType(t) ? static_cast<uint64_t>(signedOf(acc) / n) & mask : acc / static_cast<uint64_t>(n);
  std::memcpy(static_cast<char*>(out) + at * typeSize(t), &acc, typeSize(t));
}

void runOnRanks(int (*body)(RankContext&), std::vector<int> rankCounts) {
  skipWithoutGpu();
  for (int n : rankCounts) {
    INFO("ranks: " << n << ", seed " << runSeed());
    auto outcomes = runRanks(n, [body](RankContext& ctx) { return body(ctx); }, LaunchOptions{true, 240000});
    CHECK(describeFailures(outcomes).empty());
    if (!describeFailures(outcomes).empty()) FAIL(describeFailures(outcomes));
  }
}

}  // namespace weft::test
