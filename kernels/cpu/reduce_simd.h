// Internal: the loops shared by the SIMD implementations (reduce_avx2.cc, reduce_avx512.cc).
// Include only from those files, after defining WEFT_SIMD_TARGET as the target attribute of
// the including file: every function here must carry it so that the kernels inline into it.
//
// A kernel describes one element type for one ISA:
//   using Storage = <element type in memory>;
//   static constexpr size_t kLanes = <elements per block>;
//   template <SimdOp op> static void block(Storage* out, const Storage* a, const Storage* b);
// and, for floating-point types, divide():
//   using Divisor = <a vector>; static Divisor divisor(uint64_t d);
//   static void divideBlock(Storage* out, const Storage* in, Divisor d);
// A block reads all its inputs before it stores, so out may alias a, b or in exactly.
#pragma once

#ifndef WEFT_SIMD_TARGET
#error "define WEFT_SIMD_TARGET before including reduce_simd.h"
#endif

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/copy_small.h"
#include "weft/weft.h"

namespace weft::kernels {
namespace {

enum class SimdOp { kSum, kProd, kMax, kMin };

// Inputs are prefetched this many bytes ahead. The hardware prefetchers alone fall behind
// once a kernel does more than a few instructions per vector: bfloat16 sums reach ~84% of
// the a+b->c bound out of cache without it and 95-100% with it; lighter ones lose nothing.
constexpr size_t kPrefetchBytes = 512;

// Whole blocks in place; the last partial block goes through zero-padded copies, so that no
// access strays past the caller's arrays.
template <typename Kernel, SimdOp op>
WEFT_SIMD_TARGET void simdReduceLoop(void* dst, const void* a, const void* b, size_t count) {
  using T = typename Kernel::Storage;
  constexpr size_t kLanes = Kernel::kLanes;
  T* out = static_cast<T*>(dst);
  const T* left = static_cast<const T*>(a);
  const T* right = static_cast<const T*>(b);
  constexpr size_t kAhead = kPrefetchBytes / sizeof(T);
  size_t i = 0;
  if (count > kAhead) {  // the prefetched addresses stay within the arrays
    for (; i + kLanes <= count - kAhead; i += kLanes) {
      __builtin_prefetch(left + i + kAhead);
      __builtin_prefetch(right + i + kAhead);
      Kernel::template block<op>(out + i, left + i, right + i);
    }
  }
  for (; i + kLanes <= count; i += kLanes) {
    Kernel::template block<op>(out + i, left + i, right + i);
  }
  if (i < count) {
    const size_t bytes = (count - i) * sizeof(T);
    alignas(64) T leftTail[kLanes] = {};
    alignas(64) T rightTail[kLanes] = {};
    alignas(64) T outTail[kLanes];
    copyBelow<sizeof(outTail)>(leftTail, left + i, bytes);
    copyBelow<sizeof(outTail)>(rightTail, right + i, bytes);
    Kernel::template block<op>(outTail, leftTail, rightTail);
    copyBelow<sizeof(outTail)>(out + i, outTail, bytes);
  }
}

template <typename Kernel>
WEFT_SIMD_TARGET void simdReduce(void* dst, const void* a, const void* b, size_t count,
                                 weftRedOp_t op) {
  switch (op) {
    case weftSum:
    case weftAvg:  // the sum; divide() finishes the average
      return simdReduceLoop<Kernel, SimdOp::kSum>(dst, a, b, count);
    case weftProd:
      return simdReduceLoop<Kernel, SimdOp::kProd>(dst, a, b, count);
    case weftMax:
      return simdReduceLoop<Kernel, SimdOp::kMax>(dst, a, b, count);
    case weftMin:
      return simdReduceLoop<Kernel, SimdOp::kMin>(dst, a, b, count);
    case weftNumOps:
    case weftMaxRedOp:
      return;
  }
}

template <typename Kernel>
WEFT_SIMD_TARGET void simdDivide(void* dst, const void* src, size_t count, uint64_t divisor) {
  using T = typename Kernel::Storage;
  constexpr size_t kLanes = Kernel::kLanes;
  T* out = static_cast<T*>(dst);
  const T* in = static_cast<const T*>(src);
  const typename Kernel::Divisor d = Kernel::divisor(divisor);
  constexpr size_t kAhead = kPrefetchBytes / sizeof(T);
  size_t i = 0;
  if (count > kAhead) {
    for (; i + kLanes <= count - kAhead; i += kLanes) {
      __builtin_prefetch(in + i + kAhead);
      Kernel::divideBlock(out + i, in + i, d);
    }
  }
  for (; i + kLanes <= count; i += kLanes) Kernel::divideBlock(out + i, in + i, d);
  if (i < count) {
    const size_t bytes = (count - i) * sizeof(T);
    alignas(64) T inTail[kLanes] = {};
    alignas(64) T outTail[kLanes];
    copyBelow<sizeof(outTail)>(inTail, in + i, bytes);
    Kernel::divideBlock(outTail, inTail, d);
    copyBelow<sizeof(outTail)>(out + i, outTail, bytes);
  }
}

}  // namespace
}  // namespace weft::kernels
