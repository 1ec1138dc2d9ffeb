// The SIMD reduction kernels against the scalar reference: every implementation this CPU
// supports (isa.h), every type x op, counts around the vector widths, unaligned pointers and
// exact aliasing, with data full of NaNs, infinities, signed zeros, subnormals and extreme
// integers. Results must be bit-identical, except that two NaNs match whatever their payload
// and max/min of +0 and -0 may return either zero. Implementations the CPU lacks are reported
// and skipped. test_kernels.cc checks the scalar reference itself against definitions.
#include <catch2/catch.hpp>
#include <xmmintrin.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "kernel_test_data.h"

using namespace weft::kernels;
using namespace weft::test;

namespace {

constexpr size_t kCounts[] = {0, 1, 2, 3, 7, 15, 16, 17, 31, 33, 63, 64, 65, 127, 1000, 4099};
constexpr weftRedOp_t kOps[] = {weftSum, weftProd, weftMax, weftMin, weftAvg};
constexpr uint64_t kDivisors[] = {1, 2, 3, 7, 1000, (uint64_t{1} << 40) + 1, uint64_t{1} << 63,
                                  UINT64_MAX};

enum class Aliasing { kNone, kDstIsA, kDstIsB, kAllSame };

struct Layout {
  size_t dstOffset, aOffset, bOffset;  // in elements
};
constexpr Layout kLayouts[] = {{0, 0, 0}, {1, 1, 1}, {0, 1, 0}, {1, 0, 1}};

void checkReduceCase(const char* isa, const TypeInfo& info, weftRedOp_t op, size_t count,
                     const Layout& layout, Aliasing aliasing, std::mt19937_64& rng) {
  const size_t size = dataTypeSize(info.type);
  const size_t bytes = count * size;
  GuardedArray a(bytes, layout.aOffset * size, rng), b(bytes, layout.bOffset * size, rng);
  GuardedArray out(bytes, layout.dstOffset * size, rng);
  for (size_t i = 0; i < count; ++i) {
    const uint64_t x = randomElement(info, rng), y = randomElement(info, rng);
    std::memcpy(a.data + i * size, &x, size);
    std::memcpy(b.data + i * size, &y, size);
  }
  const uint8_t* right = aliasing == Aliasing::kAllSame ? a.data : b.data;
  std::vector<uint8_t> expected(bytes + 1);
  REQUIRE(reduceWithIsa("scalar", expected.data(), a.data, right, count, info.type, op));

  GuardedArray* dst = aliasing == Aliasing::kDstIsB ? &b : aliasing == Aliasing::kNone ? &out : &a;
  const std::vector<uint8_t> before = dst->storage;
  REQUIRE(reduceWithIsa(isa, dst->data, a.data, right, count, info.type, op));

  INFO(isa << " " << dataTypeName(info.type) << " " << redOpName(op) << " count " << count
           << " offsets " << layout.dstOffset << layout.aOffset << layout.bOffset << " aliasing "
           << static_cast<int>(aliasing));
  const std::string errors = compareElements(info, op == weftMax || op == weftMin,
                                             expected.data(), dst->data, count);
  if (!errors.empty()) FAIL_CHECK(errors);
  CHECK(guardsIntact(*dst, before, bytes));
}

}  // namespace

TEST_CASE("SIMD reduce matches the scalar reference for every type, op, count and layout",
          "[reduce][simd]") {
  const std::vector<const char*> isas = simdIsasToTest();
  for (const char* isa : isas) {
    for (const TypeInfo& info : kTypes) {
      std::mt19937_64 rng(static_cast<uint64_t>(info.type) * 7919 + 17);
      for (weftRedOp_t op : kOps) {
        for (size_t count : kCounts) {
          for (const Layout& layout : kLayouts) {
            for (Aliasing aliasing : {Aliasing::kNone, Aliasing::kDstIsA, Aliasing::kDstIsB,
                                      Aliasing::kAllSame}) {
              // An aliased dst shares its input's offset.
              Layout used = layout;
              if (aliasing == Aliasing::kDstIsA || aliasing == Aliasing::kAllSame) {
                used.dstOffset = used.aOffset;
              }
              if (aliasing == Aliasing::kDstIsB) used.dstOffset = used.bOffset;
              checkReduceCase(isa, info, op, count, used, aliasing, rng);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("SIMD divide matches the scalar reference for every type and divisor",
          "[divide][simd]") {
  for (const char* isa : simdIsasToTest()) {
    for (const TypeInfo& info : kTypes) {
      std::mt19937_64 rng(static_cast<uint64_t>(info.type) * 104729 + 3);
      const size_t size = dataTypeSize(info.type);
      for (uint64_t divisor : kDivisors) {
        for (size_t count : kCounts) {
          for (bool inPlace : {false, true}) {
            const size_t offset = (count % 2) * size;  // odd counts run unaligned
            GuardedArray in(count * size, offset, rng), out(count * size, offset, rng);
            for (size_t i = 0; i < count; ++i) {
              const uint64_t x = randomElement(info, rng);
              std::memcpy(in.data + i * size, &x, size);
            }
            std::vector<uint8_t> expected(count * size + 1);
            REQUIRE(divideWithIsa("scalar", expected.data(), in.data, count, info.type, divisor));
            GuardedArray& dst = inPlace ? in : out;
            const std::vector<uint8_t> before = dst.storage;
            REQUIRE(divideWithIsa(isa, dst.data, in.data, count, info.type, divisor));
            INFO(isa << " " << dataTypeName(info.type) << " / " << divisor << " count " << count
                     << (inPlace ? " in place" : ""));
            const std::string errors =
                compareElements(info, false, expected.data(), dst.data, count);
            if (!errors.empty()) FAIL_CHECK(errors);
            CHECK(guardsIntact(dst, before, count * size));
          }
        }
      }
      // Divisor 0 does nothing.
      std::vector<uint8_t> values(64 * size, 0x5a), copy = values;
      REQUIRE(divideWithIsa(isa, values.data(), values.data(), 64, info.type, 0));
      CHECK(values == copy);
    }
  }
}

TEST_CASE("SIMD max and min keep an input's bits with denormals-are-zero on, as the scalar path",
          "[reduce][simd]") {
  // A -ffast-math library or torch.set_flush_denormal turns on DAZ for the process: compares see
  // subnormals as zero, and max_ps returned a flushed zero where the scalar path kept an input,
  // so ranks on different paths (WEFT_CPU_ISA, mixed hosts) could disagree.
  std::vector<float> a(100), b(100);
  std::vector<double> ad(100), bd(100);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = std::bit_cast<float>(static_cast<uint32_t>(1 + i % 7));
    b[i] = std::bit_cast<float>(static_cast<uint32_t>(1 + i % 5));
    ad[i] = std::bit_cast<double>(static_cast<uint64_t>(1 + i % 7));
    bd[i] = std::bit_cast<double>(static_cast<uint64_t>(1 + i % 5));
  }
  const unsigned saved = _mm_getcsr();
  _mm_setcsr(saved | 0x0040);  // DAZ
  for (weftRedOp_t op : {weftMax, weftMin}) {
    std::vector<float> want(100), got(100);
    std::vector<double> wantD(100), gotD(100);
    REQUIRE(reduceWithIsa("scalar", want.data(), a.data(), b.data(), a.size(), weftFloat32, op));
    REQUIRE(reduceWithIsa("scalar", wantD.data(), ad.data(), bd.data(), ad.size(), weftFloat64, op));
    for (const char* isa : simdIsasToTest()) {
      CAPTURE(isa, op);
      REQUIRE(reduceWithIsa(isa, got.data(), a.data(), b.data(), a.size(), weftFloat32, op));
      REQUIRE(reduceWithIsa(isa, gotD.data(), ad.data(), bd.data(), ad.size(), weftFloat64, op));
      CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
      CHECK(std::memcmp(gotD.data(), wantD.data(), gotD.size() * sizeof(double)) == 0);
    }
  }
  _mm_setcsr(saved);
}

TEST_CASE("SIMD implementations ignore an invalid type or op", "[reduce][simd]") {
  for (const char* isa : kCpuIsas) {
    if (!isaSupported(isa)) continue;
    INFO(isa);
    int32_t a[40] = {1, 2}, b[40] = {3, 4}, out[40];
    std::fill(std::begin(out), std::end(out), -1);
    REQUIRE(reduceWithIsa(isa, out, a, b, 40, weftNumTypes, weftSum));
    REQUIRE(reduceWithIsa(isa, out, a, b, 40, static_cast<weftDataType_t>(15), weftSum));
    REQUIRE(reduceWithIsa(isa, out, a, b, 40, weftInt32, weftNumOps));
    REQUIRE(reduceWithIsa(isa, out, a, b, 40, weftInt32, static_cast<weftRedOp_t>(7)));
    REQUIRE(divideWithIsa(isa, out, a, 40, weftNumTypes, 2));
    CHECK(std::all_of(std::begin(out), std::end(out), [](int32_t v) { return v == -1; }));
  }
}

TEST_CASE("the dispatcher picks the best supported ISA unless WEFT_CPU_ISA names another",
          "[dispatch]") {
  const char* best = "scalar";
  for (const char* isa : kCpuIsas) {
    if (isaSupported(isa)) best = isa;
  }
  INFO("best supported: " << best);
  CHECK(isaSupported("scalar"));
  CHECK_FALSE(isaSupported("sse9"));
  CHECK_FALSE(isaSupported(nullptr));
  CHECK(std::string(selectIsa(nullptr)) == best);
  CHECK(std::string(selectIsa("")) == best);
  CHECK(std::string(selectIsa("no-such-isa")) == best);
  CHECK(std::string(selectIsa("AVX2")) == best);  // names are case-sensitive
  for (const char* isa : kCpuIsas) {
    CHECK(std::string(selectIsa(isa)) == (isaSupported(isa) ? isa : best));
  }
  const char* requested = std::getenv("WEFT_CPU_ISA");
  CHECK(std::string(activeIsa()) == selectIsa(requested));
  if (requested != nullptr && isaSupported(requested)) CHECK(std::string(activeIsa()) == requested);

  // reduce() goes through the active implementation; an unknown name does nothing.
  const float a[3] = {1, 2, 3}, b[3] = {4, 5, 6};
  float out[3] = {0, 0, 0};
  reduce(out, a, b, 3, weftFloat32, weftSum);
  CHECK((out[0] == 5 && out[1] == 7 && out[2] == 9));
  CHECK_FALSE(reduceWithIsa("no-such-isa", out, a, b, 3, weftFloat32, weftProd));
  CHECK_FALSE(divideWithIsa("no-such-isa", out, a, 3, weftFloat32, 2));
  CHECK(out[0] == 5);
  for (const char* isa : kCpuIsas) {
    if (isaSupported(isa)) continue;
    CHECK_FALSE(reduceWithIsa(isa, out, a, b, 3, weftFloat32, weftProd));
    CHECK(out[0] == 5);
  }
}
