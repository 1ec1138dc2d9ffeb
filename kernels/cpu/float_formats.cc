#include "kernels/cpu/float_formats.h"

#include <bit>
#include <cstdint>

namespace weft::kernels {
namespace {

// The value of a finite 8-bit float's magnitude bits: normals (1 + m / 2^M) * 2^(e - bias),
// subnormals m * 2^(1 - bias - M). Exact in float.
template <uint32_t Bias, uint32_t MantissaBits>
float finiteFp8Magnitude(uint32_t exponent, uint32_t mantissa) {
  if (exponent == 0) {
    return static_cast<float>(mantissa) *
           std::bit_cast<float>((127 + 1 - Bias - MantissaBits) << 23);
  }
  return std::bit_cast<float>(((exponent + 127 - Bias) << 23) | (mantissa << (23 - MantissaBits)));
}

float withSign(bool negative, float magnitude) { return negative ? -magnitude : magnitude; }

}  // namespace

float fp8e4m3ToFloat(uint8_t fp8) {
  const bool negative = (fp8 & 0x80u) != 0;
  const uint32_t exponent = (fp8 >> 3) & 0xfu;
  const uint32_t mantissa = fp8 & 0x7u;
  if (exponent == 0xf && mantissa == 0x7) {
    return withSign(negative, std::bit_cast<float>(0x7fc00000u));
  }
  return withSign(negative, finiteFp8Magnitude<7, 3>(exponent, mantissa));
}

uint8_t floatToFp8e4m3(float value) {
  constexpr uint32_t kLargestFinite = 0x7e;  // 448
  constexpr uint32_t kNan = 0x7f;
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return static_cast<uint8_t>(sign | kNan);
  const uint32_t code = detail::roundToNarrowFloat<7, 3>(magnitude);
  return static_cast<uint8_t>(sign | (code < kLargestFinite ? code : kLargestFinite));
}

float fp8e5m2ToFloat(uint8_t fp8) {
  const bool negative = (fp8 & 0x80u) != 0;
  const uint32_t exponent = (fp8 >> 2) & 0x1fu;
  const uint32_t mantissa = fp8 & 0x3u;
  if (exponent == 0x1f) {  // infinity, or NaN with its payload at the top of float's
    return withSign(negative, std::bit_cast<float>(0x7f800000u | (mantissa << 21)));
  }
  return withSign(negative, finiteFp8Magnitude<15, 2>(exponent, mantissa));
}

uint8_t floatToFp8e5m2(float value) {
  constexpr uint32_t kLargestFinite = 0x7b;  // 57344
  constexpr uint32_t kInfinity = 0x7c;
  constexpr uint32_t kQuietNan = 0x7e;
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return static_cast<uint8_t>(sign | kQuietNan);
  if (magnitude == 0x7f800000u) return static_cast<uint8_t>(sign | kInfinity);
  const uint32_t code = detail::roundToNarrowFloat<15, 2>(magnitude);
  return static_cast<uint8_t>(sign | (code < kLargestFinite ? code : kLargestFinite));
}

}  // namespace weft::kernels
