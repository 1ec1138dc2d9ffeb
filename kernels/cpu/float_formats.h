// Conversions between float and the narrow floating-point formats Weft reduces: IEEE binary16
// (half), bfloat16, and the two OCP 8-bit formats. Every conversion to a narrow format rounds to
// nearest, ties to even, handles subnormals, and keeps NaN a NaN. Half and bfloat16 are inline
// so that reduction loops over them can be vectorized.
#pragma once

#include <bit>
#include <cstdint>

namespace weft::kernels {

namespace detail {

// Rounds a non-negative, non-NaN float, given as its bits, to nearest even in a binary format
// with the given exponent bias and mantissa width, subnormals included. Returns the format's
// bits without the sign (exponent << MantissaBits | mantissa), with no upper limit: callers
// clamp codes past their largest finite value. Infinity yields such an overflowing code.
template <uint32_t Bias, uint32_t MantissaBits>
inline uint32_t roundToNarrowFloat(uint32_t magnitude) {
  constexpr uint32_t kDroppedBits = 23 - MantissaBits;
  const uint32_t floatExponent = magnitude >> 23;
  if (floatExponent > 127 - Bias) {  // normal in the narrow format
    // Round the dropped bits to nearest even; a carry out of the mantissa bumps the exponent.
    const uint32_t rounded =
        magnitude + ((1u << (kDroppedBits - 1)) - 1) + ((magnitude >> kDroppedBits) & 1u);
    return (rounded >> kDroppedBits) - ((127 - Bias) << MantissaBits);
  }
  // Subnormal in the narrow format: a count of units of 2^(1 - Bias - MantissaBits). A float
  // at most half a unit rounds to zero, and so does every float subnormal.
  const uint32_t shift = (151 - Bias - MantissaBits) - floatExponent;  // >= 24 - MantissaBits
  if (floatExponent == 0 || shift > 24) return 0;
  const uint32_t significand = (magnitude & 0x7fffffu) | 0x800000u;
  const uint32_t dropped = significand & ((1u << shift) - 1);
  const uint32_t halfway = 1u << (shift - 1);
  const uint32_t units = significand >> shift;
  // Rounding up from the largest subnormal gives the smallest normal's code, as it should.
  return units + ((dropped > halfway || (dropped == halfway && (units & 1u))) ? 1u : 0u);
}

}  // namespace detail

// IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. Overflow rounds to infinity.
inline float halfToFloat(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1fu;
  const uint32_t mantissa = half & 0x3ffu;
  // Normal, infinity or NaN (whose payload moves to the top of float's): rebias the exponent.
  const uint32_t floatExponent = exponent == 0x1f ? 0xffu : exponent + (127 - 15);
  const uint32_t normalBits = (floatExponent << 23) | (mantissa << 13);
  // Zero or subnormal: mantissa * 2^-24, a normal float, exact.
  const float subnormal = static_cast<float>(static_cast<int32_t>(mantissa)) * 0x1p-24f;
  // Selected with a mask rather than a branch: GCC will not if-convert a float multiply, so a
  // branch here would keep loops over halves from vectorizing.
  const uint32_t subnormalMask = 0u - static_cast<uint32_t>(exponent == 0);
  return std::bit_cast<float>(sign | (std::bit_cast<uint32_t>(subnormal) & subnormalMask) |
                              (normalBits & ~subnormalMask));
}

inline uint16_t floatToHalf(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {  // NaN: keep the top payload bits, force the quiet bit
    return static_cast<uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  }
  const uint32_t code = detail::roundToNarrowFloat<15, 10>(magnitude);
  return static_cast<uint16_t>(sign | (code < 0x7c00u ? code : 0x7c00u));  // overflow -> inf
}

// bfloat16: the top 16 bits of a float. Overflow rounds to infinity, as IEEE rounding does.
inline float bf16ToFloat(uint16_t bf16) { return std::bit_cast<float>(uint32_t{bf16} << 16); }

inline uint16_t floatToBf16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint16_t quietNan = static_cast<uint16_t>((bits >> 16) | 0x0040u);
  const uint16_t rounded = static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
  return (bits & 0x7fffffffu) > 0x7f800000u ? quietNan : rounded;
}

// OCP FP8 E4M3 ("E4M3FN"): bias 7, no infinities, NaN is S.1111.111, largest finite 448.
// Finite overflow and infinities saturate to +-448.
float fp8e4m3ToFloat(uint8_t fp8);
uint8_t floatToFp8e4m3(float value);

// OCP FP8 E5M2: bias 15, IEEE-like with infinities and NaNs, largest finite 57344.
// Finite overflow saturates to +-57344; infinities stay infinite.
float fp8e5m2ToFloat(uint8_t fp8);
uint8_t floatToFp8e5m2(float value);

}  // namespace weft::kernels
