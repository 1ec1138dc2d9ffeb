// Conversions between float and the narrow floating-point formats Weft reduces: IEEE binary16
// (half), bfloat16, and the two OCP 8-bit formats. Every conversion to a narrow format rounds to
// nearest, ties to even, handles subnormals, and keeps NaN a NaN. All of it is inline and
// compiles for the host (where reduction loops over it vectorize) and, under nvcc or hipcc, for
// the GPU, so the CPU and GPU kernels round alike.
#pragma once

#include <cstdint>
#if !defined(__CUDA_ARCH__) && !defined(__HIP_DEVICE_COMPILE__)
#include <bit>
#endif

#if defined(__CUDACC__) || defined(__HIPCC__)
#define WEFT_HOST_DEVICE __host__ __device__
#else
#define WEFT_HOST_DEVICE
#endif

namespace weft::kernels {

namespace detail {

WEFT_HOST_DEVICE inline uint32_t floatBits(float value) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __float_as_uint(value);
#else
  return std::bit_cast<uint32_t>(value);
#endif
}

WEFT_HOST_DEVICE inline float floatFromBits(uint32_t bits) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __uint_as_float(bits);
#else
  return std::bit_cast<float>(bits);
#endif
}

// Rounds a non-negative, non-NaN float, given as its bits, to nearest even in a binary format
// with the given exponent bias and mantissa width, subnormals included. Returns the format's
// bits without the sign (exponent << MantissaBits | mantissa), with no upper limit: callers
// clamp codes past their largest finite value. Infinity yields such an overflowing code.
template <uint32_t Bias, uint32_t MantissaBits>
WEFT_HOST_DEVICE inline uint32_t roundToNarrowFloat(uint32_t magnitude) {
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
WEFT_HOST_DEVICE inline float halfToFloat(uint16_t half) {
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
  return detail::floatFromBits(sign | (detail::floatBits(subnormal) & subnormalMask) |
                              (normalBits & ~subnormalMask));
}

WEFT_HOST_DEVICE inline uint16_t floatToHalf(float value) {
  const uint32_t bits = detail::floatBits(value);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {  // NaN: keep the top payload bits, force the quiet bit
    return static_cast<uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  }
  const uint32_t code = detail::roundToNarrowFloat<15, 10>(magnitude);
  return static_cast<uint16_t>(sign | (code < 0x7c00u ? code : 0x7c00u));  // overflow -> inf
}

// bfloat16: the top 16 bits of a float. Overflow rounds to infinity, as IEEE rounding does.
WEFT_HOST_DEVICE inline float bf16ToFloat(uint16_t bf16) { return detail::floatFromBits(uint32_t{bf16} << 16); }

WEFT_HOST_DEVICE inline uint16_t floatToBf16(float value) {
  const uint32_t bits = detail::floatBits(value);
  const uint16_t quietNan = static_cast<uint16_t>((bits >> 16) | 0x0040u);
  const uint16_t rounded = static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
  return (bits & 0x7fffffffu) > 0x7f800000u ? quietNan : rounded;
}

namespace detail {

// The value of a finite 8-bit float's magnitude bits: normals (1 + m / 2^M) * 2^(e - bias),
// subnormals m * 2^(1 - bias - M). Exact in float.
template <uint32_t Bias, uint32_t MantissaBits>
WEFT_HOST_DEVICE inline float finiteFp8Magnitude(uint32_t exponent, uint32_t mantissa) {
  if (exponent == 0) {
    return static_cast<float>(mantissa) * floatFromBits((127 + 1 - Bias - MantissaBits) << 23);
  }
  return floatFromBits(((exponent + 127 - Bias) << 23) | (mantissa << (23 - MantissaBits)));
}

WEFT_HOST_DEVICE inline float withSign(bool negative, float magnitude) { return negative ? -magnitude : magnitude; }

}  // namespace detail

// OCP FP8 E4M3 ("E4M3FN"): bias 7, no infinities, NaN is S.1111.111, largest finite 448.
// Finite overflow and infinities saturate to +-448.
WEFT_HOST_DEVICE inline float fp8e4m3ToFloat(uint8_t fp8) {
  const bool negative = (fp8 & 0x80u) != 0;
  const uint32_t exponent = (fp8 >> 3) & 0xfu;
  const uint32_t mantissa = fp8 & 0x7u;
  if (exponent == 0xf && mantissa == 0x7) return detail::withSign(negative, detail::floatFromBits(0x7fc00000u));
  return detail::withSign(negative, detail::finiteFp8Magnitude<7, 3>(exponent, mantissa));
}

WEFT_HOST_DEVICE inline uint8_t floatToFp8e4m3(float value) {
  constexpr uint32_t kLargestFinite = 0x7e;  // 448
  constexpr uint32_t kNan = 0x7f;
  const uint32_t bits = detail::floatBits(value);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return static_cast<uint8_t>(sign | kNan);
  const uint32_t code = detail::roundToNarrowFloat<7, 3>(magnitude);
  return static_cast<uint8_t>(sign | (code < kLargestFinite ? code : kLargestFinite));
}

// OCP FP8 E5M2: bias 15, IEEE-like with infinities and NaNs, largest finite 57344.
// Finite overflow saturates to +-57344; infinities stay infinite.
WEFT_HOST_DEVICE inline float fp8e5m2ToFloat(uint8_t fp8) {
  const bool negative = (fp8 & 0x80u) != 0;
  const uint32_t exponent = (fp8 >> 2) & 0x1fu;
  const uint32_t mantissa = fp8 & 0x3u;
  if (exponent == 0x1f) {  // infinity, or NaN with its payload at the top of float's
    return detail::withSign(negative, detail::floatFromBits(0x7f800000u | (mantissa << 21)));
  }
  return detail::withSign(negative, detail::finiteFp8Magnitude<15, 2>(exponent, mantissa));
}

WEFT_HOST_DEVICE inline uint8_t floatToFp8e5m2(float value) {
  constexpr uint32_t kLargestFinite = 0x7b;  // 57344
  constexpr uint32_t kInfinity = 0x7c;
  constexpr uint32_t kQuietNan = 0x7e;
  const uint32_t bits = detail::floatBits(value);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return static_cast<uint8_t>(sign | kQuietNan);
  if (magnitude == 0x7f800000u) return static_cast<uint8_t>(sign | kInfinity);
  const uint32_t code = detail::roundToNarrowFloat<15, 2>(magnitude);
  return static_cast<uint8_t>(sign | (code < kLargestFinite ? code : kLargestFinite));
}

}  // namespace weft::kernels
