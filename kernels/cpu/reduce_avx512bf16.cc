// bfloat16 reduce() and divide() rounded by AVX512-BF16, for CPUs that have it; every other
// type goes to reduce_avx512.cc. Results match reduce_scalar.cc bit for bit, but for the
// payload of a NaN produced by arithmetic.
//
// Decoded as Bf16Codec (reduce_avx512_common.h) does: evens and odds, one load, no shuffles.
// Rounded by cvtne2ps_pbh, whose words one permutation puts back in order. cvtne2ps_pbh
// matches floatToBf16 except that it flushes subnormal results to zero, so a group of blocks
// with a subnormal result is rounded with the integer method instead.
#include "kernels/cpu/reduce_impl.h"

#if defined(__x86_64__) || defined(__i386__)

#include <cstring>

#define WEFT_SIMD_TARGET \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#define WEFT_AVX512 \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")))
#include "kernels/cpu/reduce_avx512_common.h"

#define WEFT_AVX512BF16 WEFT_SIMD_TARGET

namespace weft::kernels {
namespace {

// The word order cvtne2ps_pbh(odds, evens) leaves (evens' 16 results, then odds') put back
// in element order: result word 2k is evens' k-th, 2k+1 odds' k-th.
alignas(64) constexpr uint16_t kInterleaveWords[32] = {
    0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
    8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};

// Lanes holding a float subnormal: zero exponent, nonzero mantissa.
WEFT_AVX512BF16 inline __mmask16 subnormalLanes(__m512 value) {
  const __m512i bits = _mm512_castps_si512(value);
  const __mmask16 zeroExponent = _mm512_testn_epi32_mask(bits, splat32(0x7f800000));
  return _mm512_mask_test_epi32_mask(zeroExponent, bits, splat32(0x007fffff));
}

// floatToBf16 of kBlocks x 32 floats, each block split as Bf16Codec decodes it (even
// elements, odd elements), stored in element order. One test covers all the blocks: a branch
// on every 32 results kept this loop at 82-94% of the a+b->c bound out of cache on an Intel
// Xeon, against 97-101% without it (bench/results/2026-12-02-kernels-bf16-blocks.md).
template <int kBlocks>
WEFT_AVX512BF16 inline void storeBf16(uint16_t* p, const __m512 (&evens)[kBlocks],
                                      const __m512 (&odds)[kBlocks]) {
  __mmask16 subnormal = 0;
  for (int j = 0; j < kBlocks; ++j) subnormal |= subnormalLanes(evens[j]) | subnormalLanes(odds[j]);
  if (subnormal == 0) {
    const __m512i order = load512(kInterleaveWords);
    for (int j = 0; j < kBlocks; ++j) {  // odds go to the upper half, then back in order
      const __m512i halves = (__m512i)_mm512_cvtne2ps_pbh(odds[j], evens[j]);
      store512(p + 32 * j, _mm512_permutexvar_epi16(order, halves));
    }
  } else {
    for (int j = 0; j < kBlocks; ++j) Bf16Codec::encode<0>(p + 32 * j, evens[j], odds[j]);
  }
}

// kBlocks x 32 elements: every input is read before any result is stored, so out may be a
// or b exactly.
template <SimdOp op, int kBlocks>
WEFT_AVX512BF16 inline void bf16Blocks(uint16_t* out, const uint16_t* a, const uint16_t* b) {
  __m512 evens[kBlocks], odds[kBlocks];
  for (int j = 0; j < kBlocks; ++j) {
    __m512 aEvens, aOdds, bEvens, bOdds;
    Bf16Codec::decode(a + 32 * j, aEvens, aOdds);
    Bf16Codec::decode(b + 32 * j, bEvens, bOdds);
    evens[j] = floatOp<op>(aEvens, bEvens);
    odds[j] = floatOp<op>(aOdds, bOdds);
  }
  storeBf16<kBlocks>(out, evens, odds);
}

constexpr size_t kBf16Lanes = 32;
constexpr int kBf16Blocks = 4;  // per subnormal test in the main loop
constexpr size_t kBf16Step = kBf16Blocks * kBf16Lanes;

// simdReduceLoop's structure (prefetching included), compiled for this target so that the
// blocks inline, kBf16Blocks at a time, then one at a time.
template <SimdOp op>
WEFT_AVX512BF16 void bf16ReduceLoop(void* dst, const void* a, const void* b, size_t count) {
  uint16_t* out = static_cast<uint16_t*>(dst);
  const uint16_t* left = static_cast<const uint16_t*>(a);
  const uint16_t* right = static_cast<const uint16_t*>(b);
  constexpr size_t kAhead = kPrefetchBytes / sizeof(uint16_t);
  size_t i = 0;
  if (count > kAhead) {
    for (; i + kBf16Step <= count - kAhead; i += kBf16Step) {
      for (size_t line = 0; line < kBf16Step; line += kBf16Lanes) {
        __builtin_prefetch(left + i + kAhead + line);
        __builtin_prefetch(right + i + kAhead + line);
      }
      bf16Blocks<op, kBf16Blocks>(out + i, left + i, right + i);
    }
  }
  for (; i + kBf16Lanes <= count; i += kBf16Lanes) bf16Blocks<op, 1>(out + i, left + i, right + i);
  if (i < count) {
    const size_t bytes = (count - i) * sizeof(uint16_t);
    alignas(64) uint16_t leftTail[kBf16Lanes] = {};
    alignas(64) uint16_t rightTail[kBf16Lanes] = {};
    alignas(64) uint16_t outTail[kBf16Lanes];
    std::memcpy(leftTail, left + i, bytes);
    std::memcpy(rightTail, right + i, bytes);
    bf16Blocks<op, 1>(outTail, leftTail, rightTail);
    std::memcpy(out + i, outTail, bytes);
  }
}

WEFT_AVX512BF16 inline void bf16DivideBlock(uint16_t* out, const uint16_t* in, __m512 d) {
  __m512 evens[1], odds[1];
  Bf16Codec::decode(in, evens[0], odds[0]);
  evens[0] = _mm512_div_ps(evens[0], d);
  odds[0] = _mm512_div_ps(odds[0], d);
  storeBf16<1>(out, evens, odds);
}

WEFT_AVX512BF16 void bf16Divide(void* dst, const void* src, size_t count, uint64_t divisor) {
  uint16_t* out = static_cast<uint16_t*>(dst);
  const uint16_t* in = static_cast<const uint16_t*>(src);
  const __m512 d = _mm512_set1_ps(static_cast<float>(divisor));
  constexpr size_t kAhead = kPrefetchBytes / sizeof(uint16_t);
  size_t i = 0;
  if (count > kAhead) {
    for (; i + kBf16Lanes <= count - kAhead; i += kBf16Lanes) {
      __builtin_prefetch(in + i + kAhead);
      bf16DivideBlock(out + i, in + i, d);
    }
  }
  for (; i + kBf16Lanes <= count; i += kBf16Lanes) bf16DivideBlock(out + i, in + i, d);
  if (i < count) {
    const size_t bytes = (count - i) * sizeof(uint16_t);
    alignas(64) uint16_t inTail[kBf16Lanes] = {};
    alignas(64) uint16_t outTail[kBf16Lanes];
    std::memcpy(inTail, in + i, bytes);
    bf16DivideBlock(outTail, inTail, d);
    std::memcpy(out + i, outTail, bytes);
  }
}

}  // namespace

WEFT_AVX512BF16 void reduceAvx512Bf16(void* dst, const void* a, const void* b, size_t count,
                                      weftDataType_t type, weftRedOp_t op) {
  if (type != weftBfloat16) return reduceAvx512(dst, a, b, count, type, op);
  switch (op) {
    case weftSum:
    case weftAvg: return bf16ReduceLoop<SimdOp::kSum>(dst, a, b, count);
    case weftProd: return bf16ReduceLoop<SimdOp::kProd>(dst, a, b, count);
    case weftMax: return bf16ReduceLoop<SimdOp::kMax>(dst, a, b, count);
    case weftMin: return bf16ReduceLoop<SimdOp::kMin>(dst, a, b, count);
    case weftNumOps: case weftMaxRedOp: return;
  }
}

WEFT_AVX512BF16 void divideAvx512Bf16(void* dst, const void* src, size_t count,
                                      weftDataType_t type, uint64_t divisor) {
  if (type != weftBfloat16) return divideAvx512(dst, src, count, type, divisor);
  if (divisor != 0) bf16Divide(dst, src, count, divisor);
}

}  // namespace weft::kernels

#else  // not x86: never dispatched to

namespace weft::kernels {
void reduceAvx512Bf16(void*, const void*, const void*, size_t, weftDataType_t, weftRedOp_t) {}
void divideAvx512Bf16(void*, const void*, size_t, weftDataType_t, uint64_t) {}
}  // namespace weft::kernels

#endif
