// Internal: what reduce_avx512.cc and reduce_avx512bf16.cc share: the AVX-512 loads and
// stores, float arithmetic per SimdOp, and bfloat16's integer codec. Include only from those
// files, after defining WEFT_SIMD_TARGET (reduce_simd.h) and WEFT_AVX512, the AVX-512 F/BW/
// VL/DQ target attribute these functions carry; a function whose target adds to it (AVX512-
// BF16) inlines them.
#pragma once

#ifndef WEFT_AVX512
#error "define WEFT_AVX512 before including reduce_avx512_common.h"
#endif

// GCC's avx512fintrin.h initializes _mm512_undefined_*()'s result with itself, which GCC 12
// flags as uninitialized once inlined into the kernels at -O2 -g (RelWithDebInfo), fatal
// under WEFT_WERROR (GCC bug 105593). The value is unused by design: the mask keeps every
// lane. So the including file ignores the warning from here on.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), written `__m512 __Y = __Y;`,
// which -Wmaybe-uninitialized reports wherever they inline (GCC bug 105593, fixed in GCC 13).
// The warning is silenced for the header's own lines only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#include "kernels/cpu/reduce_simd.h"

namespace weft::kernels {
namespace {

WEFT_AVX512 inline __m512i load512(const void* p) { return _mm512_loadu_si512(p); }
WEFT_AVX512 inline void store512(void* p, __m512i v) { _mm512_storeu_si512(p, v); }
WEFT_AVX512 inline __m256i load256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}
WEFT_AVX512 inline void store256(void* p, __m256i v) {
  _mm256_storeu_si256(static_cast<__m256i*>(p), v);
}
WEFT_AVX512 inline void store128(void* p, __m128i v) {
  _mm_storeu_si128(static_cast<__m128i*>(p), v);
}
WEFT_AVX512 inline __m512i splat32(uint32_t v) { return _mm512_set1_epi32(static_cast<int>(v)); }

// Max and min pick one input's bits, as the scalar (a > b || isNan(a)) ? a : b (a < b for
// min): compares and a blend, since max_ps/min_ps return a flushed zero under
// denormals-are-zero where the scalar path keeps an input (see reduce_avx2.cc).
template <SimdOp op>
WEFT_AVX512 inline __m512 floatOp(__m512 a, __m512 b) {
  if constexpr (op == SimdOp::kSum) return _mm512_add_ps(a, b);
  if constexpr (op == SimdOp::kProd) return _mm512_mul_ps(a, b);
  if constexpr (op == SimdOp::kMax || op == SimdOp::kMin) {
    const __mmask16 wins = _mm512_cmp_ps_mask(a, b, op == SimdOp::kMax ? _CMP_GT_OQ : _CMP_LT_OQ);
    return _mm512_mask_blend_ps(wins | _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), b, a);
  }
}

template <SimdOp op>
WEFT_AVX512 inline __m512d floatOp(__m512d a, __m512d b) {
  if constexpr (op == SimdOp::kSum) return _mm512_add_pd(a, b);
  if constexpr (op == SimdOp::kProd) return _mm512_mul_pd(a, b);
  if constexpr (op == SimdOp::kMax || op == SimdOp::kMin) {
    const __mmask8 wins = _mm512_cmp_pd_mask(a, b, op == SimdOp::kMax ? _CMP_GT_OQ : _CMP_LT_OQ);
    return _mm512_mask_blend_pd(wins | _mm512_cmp_pd_mask(a, a, _CMP_UNORD_Q), b, a);
  }
}

// floatToBf16 in each 32-bit lane, the bfloat16 in the top 16 bits (the low 16 are left
// over): add 0x7fff plus the lowest kept bit; a NaN keeps its top bits with the quiet bit set.
WEFT_AVX512 inline __m512i roundToBf16High(__m512 value) {
  const __m512i bits = _mm512_castps_si512(value);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), splat32(1));
  const __m512i rounded = _mm512_add_epi32(bits, _mm512_add_epi32(lsb, splat32(0x7fff)));
  const __mmask16 isNan =
      _mm512_cmpgt_epi32_mask(_mm512_and_si512(bits, splat32(0x7fffffff)), splat32(0x7f800000));
  return _mm512_mask_or_epi32(rounded, isNan, bits, splat32(0x00400000));
}

// bfloat16 is the top half of a float. The even elements decode to `low` (shifted up into
// the top half of each 32-bit lane) and the odd ones to `high` (masked, already in place), so
// that one blend of 16-bit words puts the results back in order: no shuffles.
struct Bf16Codec {
  using Storage = uint16_t;
  static constexpr int kDecodedScale = 0;
  WEFT_AVX512 static void decode(const uint16_t* p, __m512& low, __m512& high) {
    const __m512i v = load512(p);
    low = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    high = _mm512_castsi512_ps(_mm512_and_si512(v, splat32(0xffff0000)));
  }
  template <int kScale>
  WEFT_AVX512 static void encode(uint16_t* p, __m512 low, __m512 high) {
    static_assert(kScale == 0);
    const __m512i evens = _mm512_srli_epi32(roundToBf16High(low), 16);
    store512(p, _mm512_mask_blend_epi16(0xaaaaaaaa, evens, roundToBf16High(high)));
  }
};

}  // namespace
}  // namespace weft::kernels
