// Host reduction kernels against independent scalar references: narrow floats through their
// format definitions (tests/float_format_spec.h), integers in 128-bit math.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cpu/copy_small.h"
#include "kernels/float_formats.h"
#include "kernels/cpu/reduce.h"
#include "tests/float_format_spec.h"

using namespace weft::kernels;
using namespace weft::test;

namespace {

// Reductions: each element type under test, with its narrow format when it has one.
template <typename T, weftDataType_t Type>
struct NativeCase {
  using Storage = T;
  static constexpr weftDataType_t type = Type;
};

template <typename T, weftDataType_t Type, const FormatSpec* Format>
struct NarrowCase {
  using Storage = T;
  static constexpr weftDataType_t type = Type;
  static constexpr const FormatSpec* format = Format;
};

template <typename Case>
concept Narrow = requires { Case::format; };

template <typename T>
T referenceFloatOp(weftRedOp_t op, T a, T b) {
  const bool eitherNan = std::isnan(a) || std::isnan(b);
  switch (op) {
    case weftSum: case weftAvg: return a + b;
    case weftProd: return a * b;
    case weftMax: return eitherNan ? std::numeric_limits<T>::quiet_NaN() : std::max(a, b);
    case weftMin: return eitherNan ? std::numeric_limits<T>::quiet_NaN() : std::min(a, b);
    default: FAIL("bad op"); return a;
  }
}

template <typename Case>
typename Case::Storage referenceOp(weftRedOp_t op, typename Case::Storage a,
                                   typename Case::Storage b) {
  using T = typename Case::Storage;
  if constexpr (Narrow<Case>) {
    const FormatSpec& format = *Case::format;
    const float result = referenceFloatOp(op, format.decode(a), format.decode(b));
    return static_cast<T>(format.encode(result));
  } else if constexpr (std::is_floating_point_v<T>) {
    return referenceFloatOp(op, a, b);
  } else {
    // Exact in 128 bits, then wrapped to T (conversion to a narrower integer is modular).
    using Wide = std::conditional_t<std::is_signed_v<T>, __int128, unsigned __int128>;
    switch (op) {
      case weftSum: case weftAvg: return static_cast<T>(static_cast<Wide>(a) + b);
      case weftProd: return static_cast<T>(static_cast<Wide>(a) * b);
      case weftMax: return std::max(a, b);
      case weftMin: return std::min(a, b);
      default: FAIL("bad op"); return a;
    }
  }
}

// Equal, or both NaN, or (for max and min, where either may be returned) both zeros.
template <typename Case>
bool sameResult(weftRedOp_t op, typename Case::Storage expected, typename Case::Storage actual) {
  const bool zerosMatch = op == weftMax || op == weftMin;
  if constexpr (Narrow<Case>) {
    const float e = Case::format->decode(expected), a = Case::format->decode(actual);
    if (std::isnan(e) || std::isnan(a)) return std::isnan(e) && std::isnan(a);
    return expected == actual || (zerosMatch && e == 0 && a == 0);
  } else if constexpr (std::is_floating_point_v<typename Case::Storage>) {
    if (std::isnan(expected) || std::isnan(actual)) {
      return std::isnan(expected) && std::isnan(actual);
    }
    return std::memcmp(&expected, &actual, sizeof expected) == 0 ||
           (zerosMatch && expected == 0 && actual == 0);
  } else {
    return expected == actual;
  }
}

// Native floats: mostly moderate values (so products stay finite), some zeros, subnormals,
// infinities and NaNs. Everything else: uniformly random bits.
template <typename Case>
typename Case::Storage randomValue(std::mt19937_64& rng) {
  using T = typename Case::Storage;
  if constexpr (std::is_floating_point_v<T> && !Narrow<Case>) {
    const int kind = static_cast<int>(rng() % 100);
    const T sign = (rng() & 1) ? T(-1) : T(1);
    if (kind < 3) return std::numeric_limits<T>::quiet_NaN();
    if (kind < 6) return sign * std::numeric_limits<T>::infinity();
    if (kind < 10) return sign * T(0);
    if (kind < 14) return sign * std::numeric_limits<T>::denorm_min() * T(rng() % 1000);
    return sign * std::ldexp(std::uniform_real_distribution<T>(1, 2)(rng), int(rng() % 41) - 20);
  } else {
    return static_cast<T>(rng());
  }
}

template <typename T>
uint64_t bitsOf(T value) {
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof value);
  return bits;
}

enum class Aliasing { kNone, kDstIsA, kDstIsB, kAllSame };

template <typename Case>
void checkReduce(weftRedOp_t op, size_t count, Aliasing aliasing, std::mt19937_64& rng) {
  using T = typename Case::Storage;
  std::vector<T> a(count), b(count);
  for (size_t i = 0; i < count; ++i) a[i] = randomValue<Case>(rng), b[i] = randomValue<Case>(rng);
  if (aliasing == Aliasing::kAllSame) b = a;
  std::vector<T> expected(count);
  for (size_t i = 0; i < count; ++i) expected[i] = referenceOp<Case>(op, a[i], b[i]);

  const T guard = randomValue<Case>(rng);
  std::vector<T> out(count + 1, guard);  // one past the end must stay untouched
  T* dst = out.data();
  const T* left = a.data();
  const T* right = b.data();
  switch (aliasing) {
    case Aliasing::kNone: break;
    case Aliasing::kDstIsA: dst = a.data(); break;
    case Aliasing::kDstIsB: dst = b.data(); break;
    case Aliasing::kAllSame: dst = a.data(), right = a.data(); break;
  }
  reduce(dst, left, right, count, Case::type, op);

  INFO(dataTypeName(Case::type) << " " << redOpName(op) << " count " << count << " aliasing "
                                << static_cast<int>(aliasing));
  checkAll(count, [&](uint64_t i) -> std::string {
    if (sameResult<Case>(op, expected[i], dst[i])) return "";
    return "element " + std::to_string(i) + ": expected " + hex(bitsOf(expected[i])) + " got " +
           hex(bitsOf(dst[i]));
  });
  CHECK(std::memcmp(&out[count], &guard, sizeof(T)) == 0);
}

using Int8Case = NativeCase<int8_t, weftInt8>;
using Uint8Case = NativeCase<uint8_t, weftUint8>;
using Int32Case = NativeCase<int32_t, weftInt32>;
using Uint32Case = NativeCase<uint32_t, weftUint32>;
using Int64Case = NativeCase<int64_t, weftInt64>;
using Uint64Case = NativeCase<uint64_t, weftUint64>;
using FloatCase = NativeCase<float, weftFloat32>;
using DoubleCase = NativeCase<double, weftFloat64>;
using HalfCase = NarrowCase<uint16_t, weftFloat16, &kHalf>;
using Bf16Case = NarrowCase<uint16_t, weftBfloat16, &kBf16>;
using E4M3Case = NarrowCase<uint8_t, weftFloat8e4m3, &kE4M3>;
using E5M2Case = NarrowCase<uint8_t, weftFloat8e5m2, &kE5M2>;

}  // namespace

TEMPLATE_TEST_CASE("reduce matches a scalar reference for every op, count and aliasing",
                   "[reduce]", Int8Case, Uint8Case, Int32Case, Uint32Case, Int64Case, Uint64Case,
                   FloatCase, DoubleCase, HalfCase, Bf16Case, E4M3Case, E5M2Case) {
  std::mt19937_64 rng(TestType::type * 1000 + 1);
  for (weftRedOp_t op : {weftSum, weftProd, weftMax, weftMin, weftAvg}) {
    for (size_t count : {0, 1, 7, 1003}) {
      for (Aliasing aliasing :
           {Aliasing::kNone, Aliasing::kDstIsA, Aliasing::kDstIsB, Aliasing::kAllSame}) {
        checkReduce<TestType>(op, count, aliasing, rng);
      }
    }
  }
}

template <typename T>
std::vector<T> reduced(std::vector<T> a, const std::vector<T>& b, weftDataType_t type,
                       weftRedOp_t op) {
  reduce(a.data(), a.data(), b.data(), a.size(), type, op);
  return a;
}

template <typename T>
std::vector<T> divided(std::vector<T> values, weftDataType_t type, uint64_t divisor) {
  divide(values.data(), values.data(), values.size(), type, divisor);
  return values;
}

TEST_CASE("reduce on hand-picked values", "[reduce]") {
  SECTION("signed integers wrap instead of overflowing") {
    const std::vector<int32_t> a = {INT32_MAX, INT32_MIN, 65536, -3}, b = {1, -1, 65536, 5};
    using Int32s = std::vector<int32_t>;
    CHECK(reduced(a, b, weftInt32, weftSum) == Int32s{INT32_MIN, INT32_MAX, 131072, 2});
    CHECK(reduced(a, b, weftInt32, weftProd) == Int32s{INT32_MAX, INT32_MIN, 0, -15});
    CHECK(reduced<int8_t>({-128, 100}, {-1, 3}, weftInt8, weftProd) ==
          std::vector<int8_t>{-128, 44});  // 300 wraps to 44
  }
  SECTION("max and min propagate NaN from either side") {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> a = {nan, 1.0f, -INFINITY, 2.0f}, b = {1.0f, nan, 3.0f, -0.5f};
    for (weftRedOp_t op : {weftMax, weftMin}) {
      const std::vector<float> out = reduced(a, b, weftFloat32, op);
      CHECK(std::isnan(out[0]));
      CHECK(std::isnan(out[1]));
      CHECK(out[2] == (op == weftMax ? 3.0f : -INFINITY));
      CHECK(out[3] == (op == weftMax ? 2.0f : -0.5f));
    }
  }
  SECTION("narrow floats round the float result to nearest even, fp8 saturates") {
    // 1 + 2^-11 is a tie between two halves; 448 + 448 is past f8e4m3's largest.
    CHECK(reduced<uint16_t>({0x3c00}, {0x1000}, weftFloat16, weftSum)[0] == 0x3c00);
    CHECK(reduced<uint8_t>({0x7e}, {0x7e}, weftFloat8e4m3, weftSum)[0] == 0x7e);
  }
}

TEST_CASE("divide truncates integers toward zero and rounds floats", "[divide]") {
  SECTION("integers") {
    CHECK(divided<int32_t>({-7, 7, -1, INT32_MIN, INT32_MAX, 0}, weftInt32, 2) ==
          std::vector<int32_t>{-3, 3, 0, INT32_MIN / 2, INT32_MAX / 2, 0});
    CHECK(divided<int8_t>({-128, 127, -5}, weftInt8, 3) == std::vector<int8_t>{-42, 42, -1});
    CHECK(divided<int64_t>({INT64_MIN}, weftInt64, 1) == std::vector<int64_t>{INT64_MIN});
    CHECK(divided<int64_t>({INT64_MIN, INT64_MAX, -9}, weftInt64, uint64_t{1} << 63) ==
          std::vector<int64_t>{-1, 0, 0});
    CHECK(divided<uint64_t>({UINT64_MAX, 5}, weftUint64, 3) ==
          std::vector<uint64_t>{UINT64_MAX / 3, 1});
    CHECK(divided<uint8_t>({255, 7}, weftUint8, 2) == std::vector<uint8_t>{127, 3});
    CHECK(divided<int32_t>({5, -5}, weftInt32, 0) == std::vector<int32_t>{5, -5});  // no-op
  }
  SECTION("random signed values agree with C++ division") {
    std::mt19937_64 rng(7);
    std::vector<int32_t> values(1003), out(1003);
    for (int32_t& v : values) v = static_cast<int32_t>(rng());
    for (uint64_t divisor : {1, 2, 3, 7, 1000}) {
      divide(out.data(), values.data(), values.size(), weftInt32, divisor);
      checkAll(values.size(), [&](uint64_t i) {
        const int32_t expected = static_cast<int32_t>(values[i] / static_cast<int64_t>(divisor));
        return out[i] == expected ? std::string() : std::to_string(values[i]) + " gave " +
                                                        std::to_string(out[i]);
      });
    }
  }
  SECTION("floats divide in their own precision") {
    CHECK(divided<float>({1.0f, -10.0f, INFINITY}, weftFloat32, 3) ==
          std::vector<float>{1.0f / 3.0f, -10.0f / 3.0f, INFINITY});
    CHECK(divided<double>({1.0}, weftFloat64, 3) == std::vector<double>{1.0 / 3.0});
  }
  SECTION("narrow floats divide in float and round back") {
    std::mt19937_64 rng(11);
    const std::pair<weftDataType_t, const FormatSpec*> cases[] = {
        {weftFloat16, &kHalf}, {weftBfloat16, &kBf16}, {weftFloat8e4m3, &kE4M3},
        {weftFloat8e5m2, &kE5M2}};
    for (const auto& typeAndFormat : cases) {
      const weftDataType_t type = typeAndFormat.first;
      const FormatSpec* format = typeAndFormat.second;
      INFO(format->name);
      const size_t bytes = dataTypeSize(type);
      std::vector<uint8_t> values(1003 * bytes), out(values.size());
      for (uint8_t& byte : values) byte = static_cast<uint8_t>(rng());
      divide(out.data(), values.data(), 1003, type, 6);
      checkAll(1003, [&](uint64_t i) -> std::string {
        uint32_t code = 0, got = 0;
        std::memcpy(&code, &values[i * bytes], bytes);
        std::memcpy(&got, &out[i * bytes], bytes);
        const float quotient = format->decode(code) / 6.0f;
        if (std::isnan(quotient)) return format->isNanCode(got) ? "" : hex(code) + ": NaN lost";
        return got == format->encode(quotient) ? "" : hex(code) + " gave " + hex(got);
      });
    }
  }
}

TEST_CASE("data type and op names and sizes", "[names]") {
  const char* names[] = {"int8", "uint8", "int32",  "uint32",   "int64",  "uint64",
                         "half", "float", "double", "bfloat16", "f8e4m3", "f8e5m2"};
  const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  for (int type = 0; type < weftNumTypes; ++type) {
    CHECK(isValidDataType(type));
    CHECK(std::string(dataTypeName(static_cast<weftDataType_t>(type))) == names[type]);
    CHECK(dataTypeSize(static_cast<weftDataType_t>(type)) == sizes[type]);
  }
  CHECK_FALSE(isValidDataType(-1));
  CHECK_FALSE(isValidDataType(weftNumTypes));
  CHECK(dataTypeSize(weftNumTypes) == 0);
  const char* opNames[] = {"sum", "prod", "max", "min", "avg"};
  for (int op = 0; op < weftNumOps; ++op) {
    CHECK(std::string(redOpName(static_cast<weftRedOp_t>(op))) == opNames[op]);
  }
}

TEST_CASE("an invalid type or op does nothing", "[reduce]") {
  int32_t a[] = {1, 2}, b[] = {3, 4}, out[] = {-1, -1};
  reduce(out, a, b, 2, weftNumTypes, weftSum);
  reduce(out, a, b, 2, static_cast<weftDataType_t>(15), weftSum);
  reduce(out, a, b, 2, weftInt32, weftNumOps);
  reduce(out, a, b, 2, weftInt32, static_cast<weftRedOp_t>(7));
  divide(out, a, 2, weftNumTypes, 2);
  CHECK(out[0] == -1);
  CHECK(out[1] == -1);
}

TEST_CASE("copySmall and copyBelow copy exactly the bytes asked for", "[copy]") {
  std::vector<uint8_t> source(200);
  for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<uint8_t>(i * 7 + 1);
  for (size_t bytes = 0; bytes <= 130; ++bytes) {
    for (size_t offset : {0, 1, 3}) {  // unaligned destinations too
      std::vector<uint8_t> dst(bytes + 16, 0xee);
      copySmall(dst.data() + offset, source.data() + offset, bytes);
      INFO("copySmall of " << bytes << " bytes at offset " << offset);
      for (size_t i = 0; i < dst.size(); ++i) {
        const bool inside = i >= offset && i < offset + bytes;
        REQUIRE(dst[i] == (inside ? source[i] : 0xee));
      }
    }
  }
  for (size_t bytes = 0; bytes < 32; ++bytes) {
    std::vector<uint8_t> dst(48, 0xee);
    copyBelow<32>(dst.data(), source.data(), bytes);
    INFO("copyBelow<32> of " << bytes << " bytes");
    for (size_t i = 0; i < dst.size(); ++i) REQUIRE(dst[i] == (i < bytes ? source[i] : 0xee));
  }
}
