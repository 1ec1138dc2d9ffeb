// AVX-512 (F, BW, VL, DQ) reduce() and divide() (reduce_avx512bf16.cc has the variant that
// rounds bfloat16 results with AVX512-BF16). As in reduce_avx2.cc, the instruction sets are
// enabled per function by target attributes, reduce.cc calls these only on CPUs that support
// them, and results match reduce_scalar.cc bit for bit, but for the payload of a NaN produced
// by arithmetic.
//
// Per element type, 512 bits at a time; the methods are reduce_avx2.cc's, with these changes:
//  - masks (compare into k registers, mask_blend, mask_or) instead of blendv.
//  - int64/uint64: mullo_epi64 (DQ) and max/min_epi64 or epu64, no emulation.
//  - float/double max/min: the NaN a is put back with a compare mask and mask_blend.
//  - bfloat16 (integer method): NaNs quieted with mask_or on every block, no branch.
//  - fp8: codes narrow to bytes with cvtepi32_epi8; subnormals round with
//    cvt_roundps_epi32 (nearest even, embedded rounding).
// divide() vectorizes the floating-point types; integer division stays scalar.
#include "kernels/cpu/reduce_impl.h"

#if defined(__x86_64__) || defined(__i386__)

#include <type_traits>

#define WEFT_SIMD_TARGET \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")))
#define WEFT_AVX512 WEFT_SIMD_TARGET
#include "kernels/cpu/reduce_avx512_common.h"

namespace weft::kernels {
namespace {

// ---- Integers ----

// The low byte of each product: even bytes from a 16-bit multiply of the words, odd bytes
// from a multiply of the words shifted down.
WEFT_AVX512 inline __m512i mulLow8(__m512i a, __m512i b) {
  const __m512i even = _mm512_mullo_epi16(a, b);
  const __m512i odd = _mm512_mullo_epi16(_mm512_srli_epi16(a, 8), _mm512_srli_epi16(b, 8));
  return _mm512_or_si512(_mm512_and_si512(even, _mm512_set1_epi16(0xff)),
                         _mm512_slli_epi16(odd, 8));
}

template <typename T>
struct IntKernel {
  using Storage = T;
  static constexpr size_t kLanes = 64 / sizeof(T);
  static constexpr bool kSigned = std::is_signed_v<T>;

  template <SimdOp op>
  WEFT_AVX512 static __m512i apply(__m512i a, __m512i b) {
    if constexpr (sizeof(T) == 1) {
      if constexpr (op == SimdOp::kSum) return _mm512_add_epi8(a, b);
      if constexpr (op == SimdOp::kProd) return mulLow8(a, b);
      if constexpr (op == SimdOp::kMax) {
        return kSigned ? _mm512_max_epi8(a, b) : _mm512_max_epu8(a, b);
      }
      if constexpr (op == SimdOp::kMin) {
        return kSigned ? _mm512_min_epi8(a, b) : _mm512_min_epu8(a, b);
      }
    } else if constexpr (sizeof(T) == 4) {
      if constexpr (op == SimdOp::kSum) return _mm512_add_epi32(a, b);
      if constexpr (op == SimdOp::kProd) return _mm512_mullo_epi32(a, b);
      if constexpr (op == SimdOp::kMax) {
        return kSigned ? _mm512_max_epi32(a, b) : _mm512_max_epu32(a, b);
      }
      if constexpr (op == SimdOp::kMin) {
        return kSigned ? _mm512_min_epi32(a, b) : _mm512_min_epu32(a, b);
      }
    } else {
      static_assert(sizeof(T) == 8);
      if constexpr (op == SimdOp::kSum) return _mm512_add_epi64(a, b);
      if constexpr (op == SimdOp::kProd) return _mm512_mullo_epi64(a, b);
      if constexpr (op == SimdOp::kMax) {
        return kSigned ? _mm512_max_epi64(a, b) : _mm512_max_epu64(a, b);
      }
      if constexpr (op == SimdOp::kMin) {
        return kSigned ? _mm512_min_epi64(a, b) : _mm512_min_epu64(a, b);
      }
    }
  }

  template <SimdOp op>
  WEFT_AVX512 static void block(T* out, const T* a, const T* b) {
    store512(out, apply<op>(load512(a), load512(b)));
  }
};

// ---- Floating point ----

WEFT_AVX512 inline __m512 vload(const float* p) { return _mm512_loadu_ps(p); }
WEFT_AVX512 inline __m512d vload(const double* p) { return _mm512_loadu_pd(p); }
WEFT_AVX512 inline void vstore(float* p, __m512 v) { _mm512_storeu_ps(p, v); }
WEFT_AVX512 inline void vstore(double* p, __m512d v) { _mm512_storeu_pd(p, v); }
WEFT_AVX512 inline __m512 vsplat(float v) { return _mm512_set1_ps(v); }
WEFT_AVX512 inline __m512d vsplat(double v) { return _mm512_set1_pd(v); }
WEFT_AVX512 inline __m512 vdiv(__m512 a, __m512 b) { return _mm512_div_ps(a, b); }
WEFT_AVX512 inline __m512d vdiv(__m512d a, __m512d b) { return _mm512_div_pd(a, b); }

template <typename T>
struct FloatKernel {
  using Storage = T;
  static constexpr size_t kLanes = 64 / sizeof(T);
  using Divisor = decltype(vsplat(T{}));

  template <SimdOp op>
  WEFT_AVX512 static void block(T* out, const T* a, const T* b) {
    vstore(out, floatOp<op>(vload(a), vload(b)));
  }
  WEFT_AVX512 static Divisor divisor(uint64_t d) { return vsplat(static_cast<T>(d)); }
  WEFT_AVX512 static void divideBlock(T* out, const T* in, Divisor d) {
    vstore(out, vdiv(vload(in), d));
  }
};

// ---- Narrow floats: 32 elements as two vectors of 16 floats ----

// Codecs as in reduce_avx2.cc: decoded values are 2^-kDecodedScale times the true ones, and
// encode<s> takes floats 2^-s times the true results.

struct HalfCodec {
  using Storage = uint16_t;
  static constexpr int kDecodedScale = 0;
  WEFT_AVX512 static void decode(const uint16_t* p, __m512& low, __m512& high) {
    low = _mm512_cvtph_ps(load256(p));
    high = _mm512_cvtph_ps(load256(p + 16));
  }
  template <int kScale>
  WEFT_AVX512 static void encode(uint16_t* p, __m512 low, __m512 high) {
    static_assert(kScale == 0);
    store256(p, _mm512_cvtps_ph(low, _MM_FROUND_TO_NEAREST_INT));
    store256(p + 16, _mm512_cvtps_ph(high, _MM_FROUND_TO_NEAREST_INT));
  }
};

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

// floatToFp8e4m3 / floatToFp8e5m2 of 16 floats times 2^kScale, as bytes. value * 2^kScale
// must not be a float subnormal unless it rounds to 0: the scale then only shifts the
// exponent, folded into the bias.
template <typename Format, int kScale>
WEFT_AVX512 inline __m128i encodeFp8(__m512 value) {
  constexpr uint32_t kBias = Format::kBias + kScale;
  constexpr uint32_t kMantissaBits = Format::kMantissaBits;
  constexpr uint32_t kDropped = 23 - kMantissaBits;
  const __m512i bits = _mm512_castps_si512(value);
  const __m512i magnitude = _mm512_and_si512(bits, splat32(0x7fffffff));
  const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(bits, 24), splat32(0x80));
  // Normal in the format: round the dropped bits to nearest even and rebias.
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(magnitude, kDropped), splat32(1));
  const __m512i rounded =
      _mm512_add_epi32(magnitude, _mm512_add_epi32(lsb, splat32((1u << (kDropped - 1)) - 1)));
  const __m512i normal = _mm512_sub_epi32(_mm512_srli_epi32(rounded, kDropped),
                                          splat32((127 - kBias) << kMantissaBits));
  // Subnormal: the count of the smallest subnormal, rounded to nearest even (exact scaling;
  // the clamp keeps unselected lanes in range).
  constexpr float kUnitsPerOne = static_cast<float>(1u << (kBias + kMantissaBits - 1));
  constexpr float kClamp = static_cast<float>(2u << kMantissaBits);
  const __m512 units = _mm512_min_ps(
      _mm512_mul_ps(_mm512_castsi512_ps(magnitude), _mm512_set1_ps(kUnitsPerOne)),
      _mm512_set1_ps(kClamp));
  const __m512i subnormal =
      _mm512_cvt_roundps_epi32(units, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __mmask16 isNormal =
      _mm512_cmpgt_epi32_mask(magnitude, splat32(((128 - kBias) << 23) - 1));
  __m512i code = _mm512_min_epi32(_mm512_mask_blend_epi32(isNormal, subnormal, normal),
                                  splat32(Format::kLargestFinite));
  const __mmask16 isNan = _mm512_cmpgt_epi32_mask(magnitude, splat32(0x7f800000));
  code = _mm512_mask_mov_epi32(code, isNan, splat32(Format::kNan));
  if constexpr (Format::kHasInfinity) {
    const __mmask16 isInfinity = _mm512_cmpeq_epi32_mask(magnitude, splat32(0x7f800000));
    code = _mm512_mask_mov_epi32(code, isInfinity, splat32(Format::kLargestFinite + 1));
  }
  return _mm512_cvtepi32_epi8(_mm512_or_si512(code, sign));
}

// e5m2 is the top byte of a binary16; e4m3's bits, shifted, are a binary16 2^8 smaller
// (kDecodedScale), with its NaN code patched to a binary16 quiet NaN (reduce_avx2.cc).
template <typename Format>
struct Fp8Codec {
  using Storage = uint8_t;
  static constexpr int kDecodedScale = Format::kHasInfinity ? 0 : 8;
  WEFT_AVX512 static void decode(const uint8_t* p, __m512& low, __m512& high) {
    const __m512i bytes = _mm512_cvtepu8_epi16(load256(p));
    __m512i halves;
    if constexpr (Format::kHasInfinity) {
      halves = _mm512_slli_epi16(bytes, 8);
    } else {
      const __m512i sign = _mm512_slli_epi16(_mm512_and_si512(bytes, _mm512_set1_epi16(0x80)), 8);
      const __m512i magnitude = _mm512_and_si512(bytes, _mm512_set1_epi16(0x7f));
      const __mmask32 isNan = _mm512_cmpeq_epi16_mask(magnitude, _mm512_set1_epi16(0x7f));
      halves = _mm512_mask_blend_epi16(isNan,
                                       _mm512_or_si512(sign, _mm512_slli_epi16(magnitude, 7)),
                                       _mm512_or_si512(sign, _mm512_set1_epi16(0x7e00)));
    }
    low = _mm512_cvtph_ps(_mm512_castsi512_si256(halves));
    high = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(halves, 1));
  }
  template <int kScale>
  WEFT_AVX512 static void encode(uint8_t* p, __m512 low, __m512 high) {
    store128(p, encodeFp8<Format, kScale>(low));
    store128(p + 16, encodeFp8<Format, kScale>(high));
  }
};

// Decode, compute in float, round back; all loads happen before the stores.
template <typename Codec>
struct NarrowKernel {
  using Storage = typename Codec::Storage;
  static constexpr size_t kLanes = 32;
  using Divisor = __m512;

  template <SimdOp op>
  WEFT_AVX512 static void block(Storage* out, const Storage* a, const Storage* b) {
    constexpr int kScale = (op == SimdOp::kProd ? 2 : 1) * Codec::kDecodedScale;
    __m512 aLow, aHigh, bLow, bHigh;
    Codec::decode(a, aLow, aHigh);
    Codec::decode(b, bLow, bHigh);
    Codec::template encode<kScale>(out, floatOp<op>(aLow, bLow), floatOp<op>(aHigh, bHigh));
  }
  WEFT_AVX512 static Divisor divisor(uint64_t d) { return _mm512_set1_ps(static_cast<float>(d)); }
  WEFT_AVX512 static void divideBlock(Storage* out, const Storage* in, Divisor d) {
    __m512 low, high;
    Codec::decode(in, low, high);
    Codec::template encode<Codec::kDecodedScale>(out, _mm512_div_ps(low, d),
                                                 _mm512_div_ps(high, d));
  }
};

}  // namespace

WEFT_AVX512 void reduceAvx512(void* dst, const void* a, const void* b, size_t count,
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

WEFT_AVX512 void reduceManyAvx512(const ReduceMany& call) {
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

WEFT_AVX512 void divideAvx512(void* dst, const void* src, size_t count, weftDataType_t type,
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
void reduceAvx512(void*, const void*, const void*, size_t, weftDataType_t, weftRedOp_t) {}
void divideAvx512(void*, const void*, size_t, weftDataType_t, uint64_t) {}
void reduceManyAvx512(const ReduceMany&) {}
}  // namespace weft::kernels

#endif
