// AVX2 reduce() and divide(), with FMA and F16C. The instruction sets are enabled per function
// by target attributes, not by compiler flags, so that the rest of the library runs on any
// x86-64; reduce.cc calls these only on CPUs that support them. Results match
// reduce_scalar.cc bit for bit, but for the payload of a NaN produced by arithmetic.
//
// Per element type, 256 bits at a time:
//  - int8/uint8: add_epi8; products by two 16-bit multiplies (even and odd bytes);
//    max/min_epi8 or epu8.
//  - int32/uint32: add_epi32, mullo_epi32, max/min_epi32 or epu32.
//  - int64/uint64: add_epi64; products from three 32x32->64 multiplies (mul_epu32);
//    max/min by cmpgt_epi64 and a blend (unsigned: sign bits flipped first).
//  - float/double: add, mul; max/min as a compare and a blend (a > b ? a : b) with a NaN a
//    blended back in, exactly the scalar (a > b || isNan(a)) ? a : b.
//  - half: F16C (cvtph_ps, cvtps_ph rounding to nearest even), computed in float.
//  - bfloat16: even and odd elements to float with a shift and a mask, rounded back to
//    nearest even with integer adds (a NaN, found by one compare per 16 elements, quieted as
//    floatToBf16 does) and merged back with blend_epi16.
//  - fp8: decoded through binary16 and F16C (e5m2 is the top byte of a binary16; e4m3 is a
//    binary16 2^8 too small, with its NaN code patched, the scale folded into the encoding);
//    encoded with integer rounding for normals and round_ps for subnormals, saturated, then
//    packed with packus and permute4x64.
// divide() vectorizes the floating-point types; integer division stays scalar (no SIMD
// integer divide exists, and Avg's final division is a small part of an all-reduce).
#include "kernels/cpu/reduce_impl.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#include <type_traits>

#define WEFT_SIMD_TARGET __attribute__((target("avx2,fma,f16c")))
#include "kernels/cpu/reduce_simd.h"

#define WEFT_AVX2 WEFT_SIMD_TARGET

namespace weft::kernels {
namespace {

WEFT_AVX2 inline __m256i load256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}
WEFT_AVX2 inline void store256(void* p, __m256i v) {
  _mm256_storeu_si256(static_cast<__m256i*>(p), v);
}
WEFT_AVX2 inline __m128i load128(const void* p) {
  return _mm_loadu_si128(static_cast<const __m128i*>(p));
}
WEFT_AVX2 inline void store128(void* p, __m128i v) {
  _mm_storeu_si128(static_cast<__m128i*>(p), v);
}
WEFT_AVX2 inline __m256i splat32(uint32_t v) { return _mm256_set1_epi32(static_cast<int>(v)); }

// ---- Integers ----

// The low byte of each product: even bytes from a 16-bit multiply of the words (its low byte
// depends only on the low bytes), odd bytes from a multiply of the words shifted down.
WEFT_AVX2 inline __m256i mulLow8(__m256i a, __m256i b) {
  const __m256i even = _mm256_mullo_epi16(a, b);
  const __m256i odd = _mm256_mullo_epi16(_mm256_srli_epi16(a, 8), _mm256_srli_epi16(b, 8));
  return _mm256_or_si256(_mm256_and_si256(even, _mm256_set1_epi16(0xff)),
                         _mm256_slli_epi16(odd, 8));
}

// The low 64 bits of each product: lo*lo + ((hi*lo + lo*hi) << 32), all modulo 2^64.
WEFT_AVX2 inline __m256i mulLow64(__m256i a, __m256i b) {
  const __m256i low = _mm256_mul_epu32(a, b);
  const __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), b),
                                         _mm256_mul_epu32(a, _mm256_srli_epi64(b, 32)));
  return _mm256_add_epi64(low, _mm256_slli_epi64(cross, 32));
}

// All ones where a > b. AVX2 compares 64-bit lanes as signed only: unsigned values compare
// the same way once their sign bits are flipped.
template <bool kSigned>
WEFT_AVX2 inline __m256i greater64(__m256i a, __m256i b) {
  if constexpr (kSigned) {
    return _mm256_cmpgt_epi64(a, b);
  } else {
    const __m256i flip = _mm256_set1_epi64x(INT64_MIN);
    return _mm256_cmpgt_epi64(_mm256_xor_si256(a, flip), _mm256_xor_si256(b, flip));
  }
}

template <typename T>
struct IntKernel {
  using Storage = T;
  static constexpr size_t kLanes = 32 / sizeof(T);
  static constexpr bool kSigned = std::is_signed_v<T>;

  template <SimdOp op>
  WEFT_AVX2 static __m256i apply(__m256i a, __m256i b) {
    if constexpr (sizeof(T) == 1) {
      if constexpr (op == SimdOp::kSum) return _mm256_add_epi8(a, b);
      if constexpr (op == SimdOp::kProd) return mulLow8(a, b);
      if constexpr (op == SimdOp::kMax) {
        return kSigned ? _mm256_max_epi8(a, b) : _mm256_max_epu8(a, b);
      }
      if constexpr (op == SimdOp::kMin) {
        return kSigned ? _mm256_min_epi8(a, b) : _mm256_min_epu8(a, b);
      }
    } else if constexpr (sizeof(T) == 4) {
      if constexpr (op == SimdOp::kSum) return _mm256_add_epi32(a, b);
      if constexpr (op == SimdOp::kProd) return _mm256_mullo_epi32(a, b);
      if constexpr (op == SimdOp::kMax) {
        return kSigned ? _mm256_max_epi32(a, b) : _mm256_max_epu32(a, b);
      }
      if constexpr (op == SimdOp::kMin) {
        return kSigned ? _mm256_min_epi32(a, b) : _mm256_min_epu32(a, b);
      }
    } else {
      static_assert(sizeof(T) == 8);
      if constexpr (op == SimdOp::kSum) return _mm256_add_epi64(a, b);
      if constexpr (op == SimdOp::kProd) return mulLow64(a, b);
      if constexpr (op == SimdOp::kMax) return _mm256_blendv_epi8(b, a, greater64<kSigned>(a, b));
      if constexpr (op == SimdOp::kMin) return _mm256_blendv_epi8(a, b, greater64<kSigned>(a, b));
    }
  }

  template <SimdOp op>
  WEFT_AVX2 static void block(T* out, const T* a, const T* b) {
    store256(out, apply<op>(load256(a), load256(b)));
  }
};

// ---- Floating point ----

WEFT_AVX2 inline __m256 vload(const float* p) { return _mm256_loadu_ps(p); }
WEFT_AVX2 inline __m256d vload(const double* p) { return _mm256_loadu_pd(p); }
WEFT_AVX2 inline void vstore(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
WEFT_AVX2 inline void vstore(double* p, __m256d v) { _mm256_storeu_pd(p, v); }
WEFT_AVX2 inline __m256 vsplat(float v) { return _mm256_set1_ps(v); }
WEFT_AVX2 inline __m256d vsplat(double v) { return _mm256_set1_pd(v); }
WEFT_AVX2 inline __m256 vdiv(__m256 a, __m256 b) { return _mm256_div_ps(a, b); }
WEFT_AVX2 inline __m256d vdiv(__m256d a, __m256d b) { return _mm256_div_pd(a, b); }

// Max and min pick one input's bits, as the scalar (a > b || isNan(a)) ? a : b (a < b for
// min): compares and a blend rather than max_ps/min_ps, which with denormals-are-zero on (a
// -ffast-math library, torch.set_flush_denormal) return a flushed zero where the compare and
// the scalar path keep an input.
template <SimdOp op>
WEFT_AVX2 inline __m256 floatOp(__m256 a, __m256 b) {
  if constexpr (op == SimdOp::kSum) return _mm256_add_ps(a, b);
  if constexpr (op == SimdOp::kProd) return _mm256_mul_ps(a, b);
  if constexpr (op == SimdOp::kMax || op == SimdOp::kMin) {
    const __m256 wins = _mm256_cmp_ps(a, b, op == SimdOp::kMax ? _CMP_GT_OQ : _CMP_LT_OQ);
    return _mm256_blendv_ps(b, a, _mm256_or_ps(wins, _mm256_cmp_ps(a, a, _CMP_UNORD_Q)));
  }
}

template <SimdOp op>
WEFT_AVX2 inline __m256d floatOp(__m256d a, __m256d b) {
  if constexpr (op == SimdOp::kSum) return _mm256_add_pd(a, b);
  if constexpr (op == SimdOp::kProd) return _mm256_mul_pd(a, b);
  if constexpr (op == SimdOp::kMax || op == SimdOp::kMin) {
    const __m256d wins = _mm256_cmp_pd(a, b, op == SimdOp::kMax ? _CMP_GT_OQ : _CMP_LT_OQ);
    return _mm256_blendv_pd(b, a, _mm256_or_pd(wins, _mm256_cmp_pd(a, a, _CMP_UNORD_Q)));
  }
}

template <typename T>
struct FloatKernel {
  using Storage = T;
  static constexpr size_t kLanes = 32 / sizeof(T);
  using Divisor = decltype(vsplat(T{}));

  template <SimdOp op>
  WEFT_AVX2 static void block(T* out, const T* a, const T* b) {
    vstore(out, floatOp<op>(vload(a), vload(b)));
  }
  WEFT_AVX2 static Divisor divisor(uint64_t d) { return vsplat(static_cast<T>(d)); }
  WEFT_AVX2 static void divideBlock(T* out, const T* in, Divisor d) {
    vstore(out, vdiv(vload(in), d));
  }
};

// ---- Narrow floats: 16 elements as two vectors of 8 floats ----

// A codec loads 16 elements as floats and stores 16 floats rounded back. Its decoded values
// may be 2^-kDecodedScale times the true ones (exactly: a power of two); encode<s> takes
// floats 2^-s times the true results.

// IEEE binary16 through F16C.
struct HalfCodec {
  using Storage = uint16_t;
  static constexpr int kDecodedScale = 0;
  WEFT_AVX2 static void decode(const uint16_t* p, __m256& low, __m256& high) {
    low = _mm256_cvtph_ps(load128(p));
    high = _mm256_cvtph_ps(load128(p + 8));
  }
  template <int kScale>
  WEFT_AVX2 static void encode(uint16_t* p, __m256 low, __m256 high) {
    static_assert(kScale == 0);
    store128(p, _mm256_cvtps_ph(low, _MM_FROUND_TO_NEAREST_INT));
    store128(p + 8, _mm256_cvtps_ph(high, _MM_FROUND_TO_NEAREST_INT));
  }
};

// floatToBf16's rounding in each 32-bit lane, the bfloat16 in the top 16 bits (the low 16 are
// left over): add 0x7fff plus the lowest kept bit. Right for every float but NaN.
WEFT_AVX2 inline __m256i roundBf16High(__m256i bits) {
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), splat32(1));
  return _mm256_add_epi32(bits, _mm256_add_epi32(lsb, splat32(0x7fff)));
}

// floatToBf16's NaN: the top bits with the quiet bit set, in place of the rounding, which
// could carry a NaN into infinity or past the sign.
WEFT_AVX2 inline __m256i quietNansHigh(__m256i bits, __m256i rounded) {
  const __m256i isNan =
      _mm256_cmpgt_epi32(_mm256_and_si256(bits, splat32(0x7fffffff)), splat32(0x7f800000));
  return _mm256_blendv_epi8(rounded, _mm256_or_si256(bits, splat32(0x00400000)), isNan);
}

// bfloat16 is the top half of a float. The even elements decode to `low` (shifted up into
// the top half of each 32-bit lane) and the odd ones to `high` (masked, already in place), so
// that one blend of 16-bit words puts the results back in order: no shuffles.
struct Bf16Codec {
  using Storage = uint16_t;
  static constexpr int kDecodedScale = 0;
  WEFT_AVX2 static void decode(const uint16_t* p, __m256& low, __m256& high) {
    const __m256i v = load256(p);
    low = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    high = _mm256_castsi256_ps(_mm256_and_si256(v, splat32(0xffff0000)));
  }
  template <int kScale>
  WEFT_AVX2 static void encode(uint16_t* p, __m256 low, __m256 high) {
    static_assert(kScale == 0);
    const __m256i lowBits = _mm256_castps_si256(low), highBits = _mm256_castps_si256(high);
    __m256i evens = roundBf16High(lowBits), odds = roundBf16High(highBits);
    // NaNs are rare: one test for both vectors (unordered: either lane is NaN).
    const __m256 eitherNan = _mm256_cmp_ps(low, high, _CMP_UNORD_Q);
    if (!_mm256_testz_ps(eitherNan, eitherNan)) [[unlikely]] {
      evens = quietNansHigh(lowBits, evens);
      odds = quietNansHigh(highBits, odds);
    }
    store256(p, _mm256_blend_epi16(_mm256_srli_epi32(evens, 16), odds, 0xaa));
  }
};

// The 8-bit formats' constants (float_formats.cc).
template <uint32_t Bias, uint32_t MantissaBits, uint32_t LargestFinite, uint32_t NanCode,
          bool HasInfinity>
struct Fp8Format {
  static constexpr uint32_t kBias = Bias;
  static constexpr uint32_t kMantissaBits = MantissaBits;
  static constexpr uint32_t kLargestFinite = LargestFinite;
  static constexpr uint32_t kNan = NanCode;
  static constexpr bool kHasInfinity = HasInfinity;  // e5m2; e4m3 saturates infinities too
};
using E4M3 = Fp8Format<7, 3, 0x7e, 0x7f, false>;
using E5M2 = Fp8Format<15, 2, 0x7b, 0x7e, true>;

// floatToFp8e4m3 / floatToFp8e5m2 of value * 2^kScale in each 32-bit lane, the code in the
// low 8 bits. value * 2^kScale must not be a float subnormal unless it rounds to 0 (true of
// every scaled value here): the scale then only shifts the exponent, folded into the bias.
template <typename Format, int kScale>
WEFT_AVX2 inline __m256i encodeFp8(__m256 value) {
  constexpr uint32_t kBias = Format::kBias + kScale;
  constexpr uint32_t kMantissaBits = Format::kMantissaBits;
  constexpr uint32_t kDropped = 23 - kMantissaBits;
  const __m256i bits = _mm256_castps_si256(value);
  const __m256i magnitude = _mm256_and_si256(bits, splat32(0x7fffffff));
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(bits, 24), splat32(0x80));
  // Normal in the format: round the dropped bits to nearest even (a carry bumps the exponent)
  // and rebias, as detail::roundToNarrowFloat does.
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(magnitude, kDropped), splat32(1));
  const __m256i rounded =
      _mm256_add_epi32(magnitude, _mm256_add_epi32(lsb, splat32((1u << (kDropped - 1)) - 1)));
  const __m256i normal = _mm256_sub_epi32(_mm256_srli_epi32(rounded, kDropped),
                                          splat32((127 - kBias) << kMantissaBits));
  // Subnormal: the count of the smallest subnormal, 2^(1 - bias - mantissa bits), rounded to
  // nearest even. Scaling by a power of two is exact; the clamp keeps out-of-range lanes
  // (not selected below) from raising invalid-conversion flags.
  constexpr float kUnitsPerOne = static_cast<float>(1u << (kBias + kMantissaBits - 1));
  constexpr float kClamp = static_cast<float>(2u << kMantissaBits);
  const __m256 units = _mm256_min_ps(
      _mm256_mul_ps(_mm256_castsi256_ps(magnitude), _mm256_set1_ps(kUnitsPerOne)),
      _mm256_set1_ps(kClamp));
  const __m256i subnormal = _mm256_cvttps_epi32(
      _mm256_round_ps(units, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  const __m256i isNormal =
      _mm256_cmpgt_epi32(magnitude, splat32(((128 - kBias) << 23) - 1));
  __m256i code = _mm256_min_epi32(_mm256_blendv_epi8(subnormal, normal, isNormal),
                                  splat32(Format::kLargestFinite));
  const __m256i isNan = _mm256_cmpgt_epi32(magnitude, splat32(0x7f800000));
  code = _mm256_blendv_epi8(code, splat32(Format::kNan), isNan);
  if constexpr (Format::kHasInfinity) {
    const __m256i isInfinity = _mm256_cmpeq_epi32(magnitude, splat32(0x7f800000));
    code = _mm256_blendv_epi8(code, splat32(Format::kLargestFinite + 1), isInfinity);
  }
  return _mm256_or_si256(code, sign);
}

// Bytes 0-7 of the result from low's lanes, 8-15 from high's (each lane holds 0..255).
WEFT_AVX2 inline __m128i packBytes(__m256i low, __m256i high) {
  // packus_epi32 works within 128-bit lanes, giving words low 0-3, high 0-3 | low 4-7, high
  // 4-7: put the 64-bit pieces back in order, then narrow once more.
  const __m256i words =
      _mm256_permute4x64_epi64(_mm256_packus_epi32(low, high), _MM_SHUFFLE(3, 1, 2, 0));
  return _mm_packus_epi16(_mm256_castsi256_si128(words), _mm256_extracti128_si256(words, 1));
}

// e5m2 is the top byte of a binary16. e4m3's bits, shifted to bits 7-13, are a binary16 2^8
// smaller than the e4m3 value, subnormals included; only its NaN code S.1111.111 needs
// patching, to a binary16 quiet NaN, which widens to fp8e4m3ToFloat's +-0x7fc00000. The
// 2^-8 stays (kDecodedScale): sums, products and quotients of e4m3 values, so scaled, are
// the scaled results exactly, and never float subnormals.
template <typename Format>
struct Fp8Codec {
  using Storage = uint8_t;
  static constexpr int kDecodedScale = Format::kHasInfinity ? 0 : 8;
  WEFT_AVX2 static void decode(const uint8_t* p, __m256& low, __m256& high) {
    const __m256i bytes = _mm256_cvtepu8_epi16(load128(p));
    __m256i halves;
    if constexpr (Format::kHasInfinity) {
      halves = _mm256_slli_epi16(bytes, 8);
    } else {
      const __m256i sign = _mm256_slli_epi16(_mm256_and_si256(bytes, _mm256_set1_epi16(0x80)), 8);
      const __m256i magnitude = _mm256_and_si256(bytes, _mm256_set1_epi16(0x7f));
      const __m256i isNan = _mm256_cmpeq_epi16(magnitude, _mm256_set1_epi16(0x7f));
      halves = _mm256_blendv_epi8(_mm256_or_si256(sign, _mm256_slli_epi16(magnitude, 7)),
                                  _mm256_or_si256(sign, _mm256_set1_epi16(0x7e00)), isNan);
    }
    low = _mm256_cvtph_ps(_mm256_castsi256_si128(halves));
    high = _mm256_cvtph_ps(_mm256_extracti128_si256(halves, 1));
  }
  template <int kScale>
  WEFT_AVX2 static void encode(uint8_t* p, __m256 low, __m256 high) {
    store128(p, packBytes(encodeFp8<Format, kScale>(low), encodeFp8<Format, kScale>(high)));
  }
};

// Decode, compute in float, round back; all loads happen before the stores. A product of
// two scaled values carries the scale twice.
template <typename Codec>
struct NarrowKernel {
  using Storage = typename Codec::Storage;
  static constexpr size_t kLanes = 16;
  using Divisor = __m256;

  template <SimdOp op>
  WEFT_AVX2 static void block(Storage* out, const Storage* a, const Storage* b) {
    constexpr int kScale = (op == SimdOp::kProd ? 2 : 1) * Codec::kDecodedScale;
    __m256 aLow, aHigh, bLow, bHigh;
    Codec::decode(a, aLow, aHigh);
    Codec::decode(b, bLow, bHigh);
    Codec::template encode<kScale>(out, floatOp<op>(aLow, bLow), floatOp<op>(aHigh, bHigh));
  }
  WEFT_AVX2 static Divisor divisor(uint64_t d) { return _mm256_set1_ps(static_cast<float>(d)); }
  WEFT_AVX2 static void divideBlock(Storage* out, const Storage* in, Divisor d) {
    __m256 low, high;
    Codec::decode(in, low, high);
    Codec::template encode<Codec::kDecodedScale>(out, _mm256_div_ps(low, d),
                                                 _mm256_div_ps(high, d));
  }
};

}  // namespace

WEFT_AVX2 void reduceAvx2(void* dst, const void* a, const void* b, size_t count,
                          weftDataType_t type, weftRedOp_t op) {
  switch (type) {
    case weftInt8: return simdReduce<IntKernel<int8_t>>(dst, a, b, count, op);
    case weftUint8: return simdReduce<IntKernel<uint8_t>>(dst, a, b, count, op);
    case weftInt32: return simdReduce<IntKernel<int32_t>>(dst, a, b, count, op);
    case weftUint32: return simdReduce<IntKernel<uint32_t>>(dst, a, b, count, op);
    case weftInt64: return simdReduce<IntKernel<int64_t>>(dst, a, b, count, op);
    case weftUint64: return simdReduce<IntKernel<uint64_t>>(dst, a, b, count, op);
    case weftFloat16: return simdReduce<NarrowKernel<HalfCodec>>(dst, a, b, count, op);
    case weftFloat32: return simdReduce<FloatKernel<float>>(dst, a, b, count, op);
    case weftFloat64: return simdReduce<FloatKernel<double>>(dst, a, b, count, op);
    case weftBfloat16: return simdReduce<NarrowKernel<Bf16Codec>>(dst, a, b, count, op);
    case weftFloat8e4m3: return simdReduce<NarrowKernel<Fp8Codec<E4M3>>>(dst, a, b, count, op);
    case weftFloat8e5m2: return simdReduce<NarrowKernel<Fp8Codec<E5M2>>>(dst, a, b, count, op);
    case weftNumTypes: return;
  }
}

WEFT_AVX2 void reduceManyAvx2(const ReduceMany& call) {
  switch (call.type) {
    case weftInt8: return simdReduceMany<IntKernel<int8_t>>(call);
    case weftUint8: return simdReduceMany<IntKernel<uint8_t>>(call);
    case weftInt32: return simdReduceMany<IntKernel<int32_t>>(call);
    case weftUint32: return simdReduceMany<IntKernel<uint32_t>>(call);
    case weftInt64: return simdReduceMany<IntKernel<int64_t>>(call);
    case weftUint64: return simdReduceMany<IntKernel<uint64_t>>(call);
    case weftFloat16: return simdReduceMany<NarrowKernel<HalfCodec>>(call);
    case weftFloat32: return simdReduceMany<FloatKernel<float>>(call);
    case weftFloat64: return simdReduceMany<FloatKernel<double>>(call);
    case weftBfloat16: return simdReduceMany<NarrowKernel<Bf16Codec>>(call);
    case weftFloat8e4m3: return simdReduceMany<NarrowKernel<Fp8Codec<E4M3>>>(call);
    case weftFloat8e5m2: return simdReduceMany<NarrowKernel<Fp8Codec<E5M2>>>(call);
    case weftNumTypes: return;
  }
}

WEFT_AVX2 void divideAvx2(void* dst, const void* src, size_t count, weftDataType_t type,
                          uint64_t divisor) {
  if (divisor == 0) return;
  switch (type) {
    case weftFloat16: return simdDivide<NarrowKernel<HalfCodec>>(dst, src, count, divisor);
    case weftFloat32: return simdDivide<FloatKernel<float>>(dst, src, count, divisor);
    case weftFloat64: return simdDivide<FloatKernel<double>>(dst, src, count, divisor);
    case weftBfloat16: return simdDivide<NarrowKernel<Bf16Codec>>(dst, src, count, divisor);
    case weftFloat8e4m3: return simdDivide<NarrowKernel<Fp8Codec<E4M3>>>(dst, src, count, divisor);
    case weftFloat8e5m2: return simdDivide<NarrowKernel<Fp8Codec<E5M2>>>(dst, src, count, divisor);
    default: return divideScalar(dst, src, count, type, divisor);  // integers, or invalid
  }
}

}  // namespace weft::kernels

#else  // not x86: never dispatched to

namespace weft::kernels {
void reduceAvx2(void*, const void*, const void*, size_t, weftDataType_t, weftRedOp_t) {}
void divideAvx2(void*, const void*, size_t, weftDataType_t, uint64_t) {}
void reduceManyAvx2(const ReduceMany&) {}
}  // namespace weft::kernels

#endif
