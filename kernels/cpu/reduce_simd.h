// Internal: the loops shared by the SIMD implementations (reduce_avx2.cc, reduce_avx512.cc,
// reduce_avx512bf16.cc).
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
// A block is 16, 32 or 64 bytes, so that whole blocks tile a 64-byte cache line.
#pragma once

#ifndef WEFT_SIMD_TARGET
#error "define WEFT_SIMD_TARGET before including reduce_simd.h"
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include <immintrin.h>

#include "kernels/cpu/copy_small.h"
#include "kernels/cpu/reduce.h"
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

// reduceMany (reduce.h), a span of kSpanBytes (a whole number of cache lines) of every input at
// a time: the span's blocks are reduced in input order into `span`, which stays in L1, then
// stored to every output, so each input is read once and each output written once, in one
// pass. Spans of several lines spread the loop over the outputs across more work. `count`
// elements from element `from` of each array; a last span that is not whole goes through
// zero-padded copies. kStream: every output is 64-byte aligned at `from` and `count` is whole
// spans.
template <typename Kernel, SimdOp op, bool kStream, size_t kSpanBytes>
WEFT_SIMD_TARGET void reduceSpans(void* const* outs, int outCount, const void* const* ins, int inCount,
                                  size_t from, size_t count) {
  using T = typename Kernel::Storage;
  constexpr size_t kLanes = Kernel::kLanes;
  constexpr size_t kSpan = kSpanBytes / sizeof(T);
  static_assert(kSpanBytes % 64 == 0 && 64 % (kLanes * sizeof(T)) == 0,
                "a kernel's blocks must tile a cache line, and spans be whole lines");
  constexpr size_t kAhead = kPrefetchBytes / sizeof(T);
  const size_t end = from + count;
  alignas(64) T span[kSpan];
  alignas(64) T padded[2][kSpan];
  for (size_t i = from; i < end; i += kSpan) {
    const size_t n = std::min(kSpan, end - i);
    // Input k's span: in place when whole, else a zero-padded copy in padded[k > 0].
    auto input = [&](int k) -> const T* {
      const T* at = static_cast<const T*>(ins[k]) + i;
      if (n == kSpan) return at;
      T* copy = padded[k > 0];
      for (size_t j = 0; j < kSpan; ++j) copy[j] = T{};
      copyBelow<kSpanBytes>(copy, at, n * sizeof(T));
      return copy;
    };
    if (i + kSpan + kAhead <= end) {
      for (int k = 0; k < inCount; ++k) {
        const char* ahead = reinterpret_cast<const char*>(static_cast<const T*>(ins[k]) + i + kAhead);
        for (size_t line = 0; line < kSpanBytes; line += 64) __builtin_prefetch(ahead + line);
      }
    }
    if (inCount == 1) {
      std::memcpy(span, input(0), kSpanBytes);
    } else {
      const T* a = input(0);
      const T* b = input(1);
      for (size_t j = 0; j < kSpan; j += kLanes) Kernel::template block<op>(span + j, a + j, b + j);
      for (int k = 2; k < inCount; ++k) {
        const T* next = input(k);
        for (size_t j = 0; j < kSpan; j += kLanes) Kernel::template block<op>(span + j, span + j, next + j);
      }
    }
    for (int o = 0; o < outCount; ++o) {
      char* out = reinterpret_cast<char*>(static_cast<T*>(outs[o]) + i);
      if constexpr (kStream) {
        const auto* from32 = reinterpret_cast<const __m256i*>(span);
        for (size_t j = 0; j < kSpanBytes / 32; ++j) {
          _mm256_stream_si256(reinterpret_cast<__m256i*>(out) + j, _mm256_load_si256(from32 + j));
        }
      } else if (n == kSpan) {
        std::memcpy(out, span, kSpanBytes);
      } else {
        copyBelow<kSpanBytes>(out, span, n * sizeof(T));
      }
    }
  }
}

// Eight lines a span where it can (on the development VM spans of 2 and 16 lines ran slower:
// bench/results/2026-12-02-direct-allreduce-one-pass.md), one where it must. Streams where
// asked and the outputs allow (see reduceMany): a head up to the first output's 64-byte
// boundary and a tail of less than a line are stored plainly, the whole lines between around
// the caches; then a fence, so that the streamed stores are visible before whatever the caller
// publishes next.
template <typename Kernel, SimdOp op>
WEFT_SIMD_TARGET void simdReduceManyLoop(const ReduceMany& call) {
  using T = typename Kernel::Storage;
  constexpr size_t kLineBytes = 64, kSpanBytes = 8 * kLineBytes;
  constexpr size_t kLine = kLineBytes / sizeof(T), kSpan = kSpanBytes / sizeof(T);
  void* const* outs = call.outs;
  const void* const* ins = call.ins;
  const int outCount = call.outCount, inCount = call.inCount;
  const size_t count = call.count;
  if (outCount == 0) return;
  const uintptr_t misalign = reinterpret_cast<uintptr_t>(outs[0]) % kLineBytes;
  bool streaming = call.streaming && misalign % sizeof(T) == 0;
  for (int o = 1; o < outCount && streaming; ++o) {
    streaming = reinterpret_cast<uintptr_t>(outs[o]) % kLineBytes == misalign;
  }
  if (!streaming) return reduceSpans<Kernel, op, false, kSpanBytes>(outs, outCount, ins, inCount, 0, count);
  const size_t head = std::min(count, (kLineBytes - misalign) % kLineBytes / sizeof(T));
  const size_t spans = (count - head) / kSpan * kSpan;
  const size_t lines = (count - head - spans) / kLine * kLine;
  const size_t tail = count - head - spans - lines;
  reduceSpans<Kernel, op, false, kLineBytes>(outs, outCount, ins, inCount, 0, head);
  reduceSpans<Kernel, op, true, kSpanBytes>(outs, outCount, ins, inCount, head, spans);
  reduceSpans<Kernel, op, true, kLineBytes>(outs, outCount, ins, inCount, head + spans, lines);
  reduceSpans<Kernel, op, false, kLineBytes>(outs, outCount, ins, inCount, count - tail, tail);
  _mm_sfence();
}

template <typename Kernel>
WEFT_SIMD_TARGET void simdReduceMany(const ReduceMany& call) {
  switch (call.op) {
    case weftSum:
    case weftAvg:
      return simdReduceManyLoop<Kernel, SimdOp::kSum>(call);
    case weftProd:
      return simdReduceManyLoop<Kernel, SimdOp::kProd>(call);
    case weftMax:
      return simdReduceManyLoop<Kernel, SimdOp::kMax>(call);
    case weftMin:
      return simdReduceManyLoop<Kernel, SimdOp::kMin>(call);
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
