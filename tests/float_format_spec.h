// Narrow float formats described from their specifications (bit widths, bias, specials), with
// Weft's conversions under test, and small helpers shared by the kernel and format tests.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>

#include "kernels/float_formats.h"

namespace weft::test {


// A narrow float format described from its specification, with the conversions under test.
struct FormatSpec {
  const char* name;
  int exponentBits;
  int mantissaBits;
  int bias;
  bool ieeeSpecials;  // top exponent is inf/NaN (half, bf16, e5m2); else only S.1111.111 is NaN
  bool saturates;     // finite overflow gives the largest finite value instead of infinity
  uint32_t (*encode)(float);
  float (*decode)(uint32_t);

  uint32_t signBit() const { return 1u << (exponentBits + mantissaBits); }
  uint32_t magnitudeMask() const { return signBit() - 1; }
  uint32_t topExponent() const { return (1u << exponentBits) - 1; }
  bool isNanCode(uint32_t code) const {
    const uint32_t magnitude = code & magnitudeMask();
    if (!ieeeSpecials) return magnitude == magnitudeMask();
    return (magnitude >> mantissaBits) == topExponent() && (magnitude & ((1u << mantissaBits) - 1));
  }
  uint32_t largestFiniteCode() const {
    return ieeeSpecials ? (topExponent() << mantissaBits) - 1 : magnitudeMask() - 1;
  }
  // The value of a non-NaN code, straight from the definition.
  double referenceValue(uint32_t code) const {
    const uint32_t magnitude = code & magnitudeMask();
    const uint32_t exponent = magnitude >> mantissaBits;
    const uint32_t mantissa = magnitude & ((1u << mantissaBits) - 1);
    double value;
    if (ieeeSpecials && exponent == topExponent()) {
      value = std::numeric_limits<double>::infinity();
    } else if (exponent == 0) {
      value = std::ldexp(static_cast<double>(mantissa), 1 - bias - mantissaBits);
    } else {
      value = std::ldexp(static_cast<double>(mantissa | (1u << mantissaBits)),
                         static_cast<int>(exponent) - bias - mantissaBits);
    }
    return (code & signBit()) ? -value : value;
  }
};

inline const FormatSpec kHalf{"half", 5, 10, 15, true, false,
                       [](float f) -> uint32_t { return kernels::floatToHalf(f); },
                       [](uint32_t c) { return kernels::halfToFloat(static_cast<uint16_t>(c)); }};
inline const FormatSpec kBf16{"bfloat16", 8, 7, 127, true, false,
                       [](float f) -> uint32_t { return kernels::floatToBf16(f); },
                       [](uint32_t c) { return kernels::bf16ToFloat(static_cast<uint16_t>(c)); }};
inline const FormatSpec kE4M3{"f8e4m3", 4, 3, 7, false, true,
                       [](float f) -> uint32_t { return kernels::floatToFp8e4m3(f); },
                       [](uint32_t c) { return kernels::fp8e4m3ToFloat(static_cast<uint8_t>(c)); }};
inline const FormatSpec kE5M2{"f8e5m2", 5, 2, 15, true, true,
                       [](float f) -> uint32_t { return kernels::floatToFp8e5m2(f); },
                       [](uint32_t c) { return kernels::fp8e5m2ToFloat(static_cast<uint8_t>(c)); }};
inline const FormatSpec* const kFormats[] = {&kHalf, &kBf16, &kE4M3, &kE5M2};

inline std::string hex(uint64_t value) {
  std::ostringstream out;
  out << "0x" << std::hex << value;
  return out.str();
}

// Runs check(i) for i < count, failing with the first few messages and the number of failures.
template <typename Check>
inline void checkAll(uint64_t count, Check check) {
  uint64_t failures = 0;
  for (uint64_t i = 0; i < count; ++i) {
    const std::string error = check(i);
    if (!error.empty() && ++failures <= 5) FAIL_CHECK(error);
  }
  CHECK(failures == 0);
}

}  // namespace weft::test
