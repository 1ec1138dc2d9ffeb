// Microbenchmark of the host reduction kernels (kernels/cpu) with Google Benchmark: every ISA
// this CPU supports x every type x op, at sizes that fit in cache (16 KiB, 256 KiB per array)
// and one that does not (64 MiB per array), next to the "a+b->c streaming bound": a plain
// float a+b->c loop over arrays of the same byte size, so that kernel / bound reads off one
// run (bench/kernel_ratio.py does that for the 64 MiB sums).
//
// The direct all-reduce's pattern is timed too, on 2 ranks: two inputs summed into two outputs
// written around the caches, by reduceMany (one pass) and, for comparison, the way it was done
// before (a sum into a 128 KiB scratch in cache, then streaming copies out of it).
//
// Names: reduce/<isa>/<type>/<op>/<bytes per array>, bound/float_add/<bytes per array>,
// many/<isa>/<type>/sum/<bytes per array> and chain/<type>/sum/<bytes per array>, each
// followed by benchmark's /min_time:S.
// Bytes processed count what the loop reads and writes: 3 x count x element size (4 x for
// many and chain: two arrays read, two written). The "GB" counter is that in 10^9 bytes per
// second (bytes_per_second in --benchmark_format=json).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/copy_streaming.h"
#include "kernels/float_formats.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/reduce.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define WEFT_BENCH_X86 1
#else
#define WEFT_BENCH_X86 0
#endif

namespace {

using namespace weft::kernels;

constexpr int64_t kSizes[] = {16 << 10, 256 << 10, 64 << 20};  // bytes per array
constexpr size_t kLargest = 64 << 20;
// Seconds per benchmark: a full run stays well under a minute on 2 cores. --kernel_min_time=S
// sets another (benchmark's own --benchmark_min_time is overridden by per-benchmark times).
double minTime = 0.05;

constexpr weftDataType_t kTypes[] = {weftInt8,    weftUint8,    weftInt32,      weftUint32,
                                     weftInt64,   weftUint64,   weftFloat16,    weftFloat32,
                                     weftFloat64, weftBfloat16, weftFloat8e4m3, weftFloat8e5m2};
constexpr weftRedOp_t kOps[] = {weftSum, weftProd, weftMax, weftMin};

// Inputs a and b and output c of the largest size, shared by every benchmark and filled for
// one type at a time (benchmarks run grouped by type).
struct Arrays {
  uint8_t* a = nullptr;
  uint8_t* b = nullptr;
  uint8_t* c = nullptr;
  uint8_t* d = nullptr;  // many/chain's second output
  int filledFor = -1;
};

uint8_t* allocatePages(size_t bytes) {
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(4096, bytes));
  if (p == nullptr) std::abort();
  std::memset(p, 0, bytes);  // fault the pages in before anything is timed
  return p;
}

// One element of `type` near 1.5 (in [1, 2) for the float types), so that sums and products
// stay normal: subnormal operands would time the CPU's microcode assists, not the kernels.
uint64_t sampleElement(weftDataType_t type, std::mt19937_64& rng) {
  const float value = 1.0f + static_cast<float>(rng() % 1024) / 1024.0f;
  switch (type) {
    case weftFloat16: return floatToHalf(value);
    case weftFloat32: return std::bit_cast<uint32_t>(value);
    case weftFloat64: return std::bit_cast<uint64_t>(static_cast<double>(value));
    case weftBfloat16: return floatToBf16(value);
    case weftFloat8e4m3: return floatToFp8e4m3(value);
    case weftFloat8e5m2: return floatToFp8e5m2(value);
    default: return rng();  // integers: any bits
  }
}

void fillArray(uint8_t* p, weftDataType_t type, std::mt19937_64& rng) {
  const size_t size = dataTypeSize(type);
  constexpr size_t kPattern = 64 << 10;  // bytes, copied over the rest
  for (size_t i = 0; i < kPattern; i += size) {
    const uint64_t bits = sampleElement(type, rng);
    std::memcpy(p + i, &bits, size);
  }
  for (size_t i = kPattern; i < kLargest; i += kPattern) std::memcpy(p + i, p, kPattern);
}

Arrays& arraysFor(weftDataType_t type) {
  static Arrays arrays{allocatePages(kLargest), allocatePages(kLargest), allocatePages(kLargest),
                       allocatePages(kLargest)};
  if (arrays.filledFor != static_cast<int>(type)) {
    std::mt19937_64 rng(static_cast<uint64_t>(type) + 1);
    fillArray(arrays.a, type, rng);
    fillArray(arrays.b, type, rng);
    arrays.filledFor = static_cast<int>(type);
  }
  return arrays;
}

void reportBytes(benchmark::State& state, double bytesPerIteration) {
  state.SetBytesProcessed(static_cast<int64_t>(bytesPerIteration) * state.iterations());
  state.counters["GB"] =
      benchmark::Counter(bytesPerIteration / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

void reduceBenchmark(benchmark::State& state, const char* isa, weftDataType_t type,
                     weftRedOp_t op) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  const size_t count = bytes / dataTypeSize(type);
  Arrays& arrays = arraysFor(type);
  for (auto _ : state) {
    reduceWithIsa(isa, arrays.c, arrays.a, arrays.b, count, type, op);
    benchmark::ClobberMemory();
  }
  reportBytes(state, 3.0 * static_cast<double>(count * dataTypeSize(type)));
}

void manyBenchmark(benchmark::State& state, const char* isa, weftDataType_t type) {
  const size_t count = static_cast<size_t>(state.range(0)) / dataTypeSize(type);
  Arrays& arrays = arraysFor(type);
  const void* ins[] = {arrays.a, arrays.b};
  void* outs[] = {arrays.c, arrays.d};
  const ReduceMany call{.outs = outs, .outCount = 2, .ins = ins, .inCount = 2, .count = count,
                        .type = type, .op = weftSum, .streaming = true};
  for (auto _ : state) {
    reduceManyWithIsa(isa, call);
    benchmark::ClobberMemory();
  }
  reportBytes(state, 4.0 * static_cast<double>(count * dataTypeSize(type)));
}

void chainBenchmark(benchmark::State& state, weftDataType_t type) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  const size_t element = dataTypeSize(type);
  constexpr size_t kScratch = 128 << 10;
  static std::vector<uint8_t> scratch(kScratch);
  Arrays& arrays = arraysFor(type);
  for (auto _ : state) {
    for (size_t at = 0; at < bytes; at += kScratch) {
      const size_t n = std::min(kScratch, bytes - at);
      reduce(scratch.data(), arrays.a + at, arrays.b + at, n / element, type, weftSum);
      copyStreaming(arrays.c + at, scratch.data(), n);
      copyStreaming(arrays.d + at, scratch.data(), n);
    }
    benchmark::ClobberMemory();
  }
  reportBytes(state, 4.0 * static_cast<double>(bytes));
}

// The streaming bound: c = a + b over floats, the simplest loop with the same traffic (two
// arrays read, one written, ordinary stores).
#if WEFT_BENCH_X86
__attribute__((target("avx2"))) void addFloatsAvx2(float* c, const float* a, const float* b,
                                                   size_t count) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    _mm256_storeu_ps(c + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  }
  for (; i < count; ++i) c[i] = a[i] + b[i];
}
#endif

void addFloatsPlain(float* c, const float* a, const float* b, size_t count) {
  for (size_t i = 0; i < count; ++i) c[i] = a[i] + b[i];
}

void boundBenchmark(benchmark::State& state) {
  const size_t count = static_cast<size_t>(state.range(0)) / sizeof(float);
  Arrays& arrays = arraysFor(weftFloat32);
  auto* c = reinterpret_cast<float*>(arrays.c);
  const auto* a = reinterpret_cast<const float*>(arrays.a);
  const auto* b = reinterpret_cast<const float*>(arrays.b);
  auto add = addFloatsPlain;
#if WEFT_BENCH_X86
  if (isaSupported("avx2")) add = addFloatsAvx2;
#endif
  for (auto _ : state) {
    add(c, a, b, count);
    benchmark::ClobberMemory();
  }
  reportBytes(state, 3.0 * static_cast<double>(count * sizeof(float)));
}

void registerAll() {
  for (int64_t bytes : kSizes) {
    benchmark::RegisterBenchmark("bound/float_add", boundBenchmark)
        ->Arg(bytes)
        ->MinTime(minTime)
        ->Unit(benchmark::kMicrosecond);
  }
  for (weftDataType_t type : kTypes) {
    for (const char* isa : kCpuIsas) {
      if (!isaSupported(isa)) continue;
      for (weftDataType_t sumType : {weftFloat32, weftBfloat16}) {
        if (type != sumType) continue;
        benchmark::RegisterBenchmark((std::string("many/") + isa + "/" + dataTypeName(type) + "/sum").c_str(),
                                     manyBenchmark, isa, type)
            ->Arg(256 << 10)
            ->Arg(64 << 20)
            ->MinTime(minTime)
            ->Unit(benchmark::kMicrosecond);
      }
      for (weftRedOp_t op : kOps) {
        const std::string name =
            std::string("reduce/") + isa + "/" + dataTypeName(type) + "/" + redOpName(op);
        benchmark::RegisterBenchmark(name.c_str(), reduceBenchmark, isa, type, op)
            ->ArgsProduct({std::vector<int64_t>(std::begin(kSizes), std::end(kSizes))})
            ->MinTime(minTime)
            ->Unit(benchmark::kMicrosecond);
      }
    }
    if (type == weftFloat32 || type == weftBfloat16) {
      benchmark::RegisterBenchmark((std::string("chain/") + dataTypeName(type) + "/sum").c_str(), chainBenchmark,
                                   type)
          ->Arg(256 << 10)
          ->Arg(64 << 20)
          ->MinTime(minTime)
          ->Unit(benchmark::kMicrosecond);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Takes --kernel_min_time=S out of the arguments before benchmark sees them.
  const std::string minTimeFlag = "--kernel_min_time=";
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind(minTimeFlag, 0) == 0) {
      minTime = std::strtod(arg.c_str() + minTimeFlag.size(), nullptr);
      if (!(minTime > 0)) {
        std::fprintf(stderr, "kernel_bench: bad %s\n", argv[i]);
        return 1;
      }
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("weft_active_isa", activeIsa());
  registerAll();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
