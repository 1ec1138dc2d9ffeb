// Test data for the host reduction kernels, shared by the SIMD and reduceMany tests: the
// implementations to test, each element type's shape, random elements biased towards the values
// that break kernels, guarded arrays, and a bit-exact comparison (NaNs match whatever their
// payload; max/min of +0 and -0 may return either zero).
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/reduce.h"
#include "kernels/float_formats.h"

namespace weft::test {

using namespace weft::kernels;

// The supported implementations other than the scalar reference; the others are reported.
inline std::vector<const char*> simdIsasToTest() {
  std::vector<const char*> isas;
  for (const char* isa : kCpuIsas) {
    if (std::string(isa) == "scalar") continue;
    if (isaSupported(isa)) {
      isas.push_back(isa);
    } else {
      WARN(isa << ": not supported by this CPU, skipped");
    }
  }
  return isas;
}

enum class Kind { kInteger, kFloat32, kFloat64, kNarrow };

struct TypeInfo {
  weftDataType_t type;
  Kind kind;
  int exponentBits = 0;  // narrow floats only
  int mantissaBits = 0;
  float (*decode)(uint64_t) = nullptr;
};

inline const TypeInfo kTypes[] = {
    {weftInt8, Kind::kInteger},
    {weftUint8, Kind::kInteger},
    {weftInt32, Kind::kInteger},
    {weftUint32, Kind::kInteger},
    {weftInt64, Kind::kInteger},
    {weftUint64, Kind::kInteger},
    {weftFloat16, Kind::kNarrow, 5, 10,
     [](uint64_t c) { return halfToFloat(static_cast<uint16_t>(c)); }},
    {weftFloat32, Kind::kFloat32},
    {weftFloat64, Kind::kFloat64},
    {weftBfloat16, Kind::kNarrow, 8, 7,
     [](uint64_t c) { return bf16ToFloat(static_cast<uint16_t>(c)); }},
    {weftFloat8e4m3, Kind::kNarrow, 4, 3,
     [](uint64_t c) { return fp8e4m3ToFloat(static_cast<uint8_t>(c)); }},
    {weftFloat8e5m2, Kind::kNarrow, 5, 2,
     [](uint64_t c) { return fp8e5m2ToFloat(static_cast<uint8_t>(c)); }},
};

// A float format's bits from sign, exponent field and mantissa field.
inline uint64_t floatBits(uint64_t sign, uint64_t exponent, uint64_t mantissa, int exponentBits,
                   int mantissaBits) {
  const uint64_t mantissaMask = (uint64_t{1} << mantissaBits) - 1;
  const uint64_t exponentMask = (uint64_t{1} << exponentBits) - 1;
  return (sign << (exponentBits + mantissaBits)) | ((exponent & exponentMask) << mantissaBits) |
         (mantissa & mantissaMask);
}

// Random element bits, biased towards the values that break kernels.
inline uint64_t randomElement(const TypeInfo& info, std::mt19937_64& rng) {
  const uint64_t bits = rng();
  const int pick = static_cast<int>(rng() % 100);
  const uint64_t sign = rng() & 1;
  if (info.kind == Kind::kInteger) {
    const int width = static_cast<int>(dataTypeSize(info.type)) * 8;
    const uint64_t top = uint64_t{1} << (width - 1);
    const uint64_t extremes[] = {0, 1, 2, ~uint64_t{0}, top, top - 1, top + 1, 0x5555555555555555};
    return pick < 40 ? extremes[rng() % std::size(extremes)] : bits;
  }
  int exponentBits = info.exponentBits, mantissaBits = info.mantissaBits;
  if (info.kind == Kind::kFloat32) exponentBits = 8, mantissaBits = 23;
  if (info.kind == Kind::kFloat64) exponentBits = 11, mantissaBits = 52;
  const uint64_t topExponent = (uint64_t{1} << exponentBits) - 1;
  const uint64_t bias = topExponent / 2;
  const uint64_t mantissaTop = uint64_t{1} << (mantissaBits - 1);
  auto make = [&](uint64_t exponent, uint64_t mantissa) {
    return floatBits(sign, exponent, mantissa, exponentBits, mantissaBits);
  };
  if (pick < 6) return make(topExponent, bits | mantissaTop);         // quiet NaN
  if (pick < 8) return make(topExponent, (bits & ~mantissaTop) | 1);  // signalling NaN
  if (pick < 13) return make(topExponent, 0);                         // infinity (e4m3: 256)
  if (pick < 18) return make(0, 0);                                   // signed zero
  if (pick < 28) return make(0, bits);                                // subnormal
  if (pick < 36) return make(1 + rng() % 3, bits);                    // smallest normals
  if (pick < 44) return make(topExponent - 1 - rng() % 3, bits);      // near overflow
  if (pick < 52) return make(topExponent, rng() % 2 ? ~uint64_t{0} : ~uint64_t{1});
  if (pick < 80) {  // moderate, so that products stay in range
    const uint64_t spread = std::min<uint64_t>(bias, 12);
    return make(bias - spread + rng() % (2 * spread + 1), bits);
  }
  return bits;
}

// An element-aligned array with guard bytes around it, 64-byte aligned plus offset elements.
struct GuardedArray {
  static constexpr size_t kGuard = 128;
  std::vector<uint8_t> storage;
  uint8_t* data;

  GuardedArray(size_t bytes, size_t offsetBytes, std::mt19937_64& rng)
      : storage(bytes + offsetBytes + 2 * kGuard + 64) {
    for (uint8_t& byte : storage) byte = static_cast<uint8_t>(rng());
    const uintptr_t start = reinterpret_cast<uintptr_t>(storage.data()) + kGuard;
    data = storage.data() + ((start + 63) / 64 * 64 - reinterpret_cast<uintptr_t>(storage.data())) +
           offsetBytes;
  }
};

inline std::string hex(uint64_t value) {
  std::ostringstream out;
  out << "0x" << std::hex << value;
  return out.str();
}

inline bool isNanElement(const TypeInfo& info, uint64_t bits) {
  switch (info.kind) {
    case Kind::kInteger: return false;
    case Kind::kFloat32: return std::isnan(std::bit_cast<float>(static_cast<uint32_t>(bits)));
    case Kind::kFloat64: return std::isnan(std::bit_cast<double>(bits));
    case Kind::kNarrow: return std::isnan(info.decode(bits));
  }
  return false;
}

inline bool isZeroElement(const TypeInfo& info, uint64_t bits) {
  const size_t width = dataTypeSize(info.type) * 8;
  return info.kind != Kind::kInteger && (bits & ~(uint64_t{1} << (width - 1))) == 0;
}

// Compares count elements of actual with expected; returns a description of the first few
// mismatches, or "".
inline std::string compareElements(const TypeInfo& info, bool zerosMatch, const uint8_t* expected,
                            const uint8_t* actual, size_t count) {
  const size_t size = dataTypeSize(info.type);
  std::string errors;
  size_t failures = 0;
  for (size_t i = 0; i < count; ++i) {
    uint64_t e = 0, a = 0;
    std::memcpy(&e, expected + i * size, size);
    std::memcpy(&a, actual + i * size, size);
    if (e == a) continue;
    if (isNanElement(info, e) && isNanElement(info, a)) continue;
    if (zerosMatch && isZeroElement(info, e) && isZeroElement(info, a)) continue;
    if (++failures <= 4) {
      errors += " [" + std::to_string(i) + "] expected " + hex(e) + " got " + hex(a) + ";";
    }
  }
  if (failures > 4) errors += " ... " + std::to_string(failures) + " mismatches in all";
  return errors;
}

// Whether the guard bytes around [data, data + bytes) are as they were in `before`.
inline bool guardsIntact(const GuardedArray& array, const std::vector<uint8_t>& before, size_t bytes) {
  const size_t begin = static_cast<size_t>(array.data - array.storage.data());
  return std::memcmp(array.storage.data(), before.data(), begin) == 0 &&
         std::memcmp(array.storage.data() + begin + bytes, before.data() + begin + bytes,
                     before.size() - begin - bytes) == 0;
}

}  // namespace weft::test
