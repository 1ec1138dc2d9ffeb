// The portable implementation of reduce(), divide() and scale(), and the reference that the SIMD ones
// (reduce_avx2.cc, reduce_avx512.cc) match bit for bit; reduce.cc dispatches between them.
//
// Each (type, op) pair gets its own simple counted loop, chosen by one switch per call, so that
// the loops over native types vectorize. Narrow float types load into float, compute, and round
// back to nearest even per element.
//
// Semantics:
//  - Integer Sum and Prod wrap modulo 2^bits, signed types included (computed as unsigned).
//  - Float Max and Min propagate NaN: if either input is NaN the result is NaN (unlike fmax,
//    which drops it), so a NaN on any rank is never hidden by the reduction. Which of +0 and
//    -0 they return for a pair of zeros is unspecified.
//  - An invalid type or op, or divisor 0, does nothing: callers validate their arguments, and
//    these functions stay defined behaviour if one slips through.
#include "kernels/cpu/reduce_impl.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/copy_streaming.h"
#include "kernels/float_formats.h"

namespace weft::kernels {
namespace {

// How one type is stored in memory and the type its arithmetic is done in.
template <typename T>
struct NativeElement {
  using Storage = T;
  using Compute = T;
  static T load(T value) { return value; }
  static T store(T value) { return value; }
};

template <typename T, float (*ToFloat)(T), T (*FromFloat)(float)>
struct NarrowFloatElement {
  using Storage = T;
  using Compute = float;
  static float load(T value) { return ToFloat(value); }
  static T store(float value) { return FromFloat(value); }
};

using HalfElement = NarrowFloatElement<uint16_t, halfToFloat, floatToHalf>;
using Bf16Element = NarrowFloatElement<uint16_t, bf16ToFloat, floatToBf16>;
using Fp8E4M3Element = NarrowFloatElement<uint8_t, fp8e4m3ToFloat, floatToFp8e4m3>;
using Fp8E5M2Element = NarrowFloatElement<uint8_t, fp8e5m2ToFloat, floatToFp8e5m2>;

// Integer arithmetic in at least unsigned int, so that it wraps instead of overflowing (small
// types would otherwise promote to int, where e.g. a product can overflow).
template <typename T>
using WrappingInt = decltype(std::make_unsigned_t<T>{} + 0u);

struct SumOp {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(static_cast<WrappingInt<T>>(a) + static_cast<WrappingInt<T>>(b));
    } else {
      return a + b;
    }
  }
};

struct ProdOp {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(static_cast<WrappingInt<T>>(a) * static_cast<WrappingInt<T>>(b));
    } else {
      return a * b;
    }
  }
};

// Written as comparisons, not std::isnan, so that the loops vectorize.
template <typename T>
bool isNan(T value) {
  if constexpr (std::is_floating_point_v<T>) {
    return value != value;
  } else {
    return false;
  }
}

struct MaxOp {
  template <typename T>
  static T apply(T a, T b) {
    return (a > b || isNan(a)) ? a : b;
  }
};

struct MinOp {
  template <typename T>
  static T apply(T a, T b) {
    return (a < b || isNan(a)) ? a : b;
  }
};

// Tells GCC's vectorizer that iterations are independent, sparing it run-time overlap checks.
// (Clang's counterpart, vectorize(assume_safety), warns wherever vectorizing is impossible, and
// Clang vectorizes these loops with run-time checks anyway.)
#if defined(__GNUC__) && !defined(__clang__)
#define WEFT_INDEPENDENT_ITERATIONS _Pragma("GCC ivdep")
#else
#define WEFT_INDEPENDENT_ITERATIONS
#endif

// Calls body(i) for every i < count; the iterations must be independent. Most run in blocks of
// fixed length because GCC's -O2 cost model vectorizes only loops that need no scalar
// remainder; -O3 would vectorize a plain loop too.
template <typename Body>
void forEachIndex(size_t count, Body body) {
  constexpr size_t kBlock = 64;
  size_t i = 0;
  for (; i + kBlock <= count; i += kBlock) {
    WEFT_INDEPENDENT_ITERATIONS
    for (size_t j = 0; j < kBlock; ++j) body(i + j);
  }
  WEFT_INDEPENDENT_ITERATIONS
  for (; i < count; ++i) body(i);
}

// dst is either disjoint from a and b or equal to one or both, so iterations are independent.
template <typename Element, typename Op>
void reduceLoop(void* dst, const void* a, const void* b, size_t count) {
  using Storage = typename Element::Storage;
  Storage* out = static_cast<Storage*>(dst);
  const Storage* left = static_cast<const Storage*>(a);
  const Storage* right = static_cast<const Storage*>(b);
  forEachIndex(count, [=](size_t i) {
    out[i] = Element::store(Op::apply(Element::load(left[i]), Element::load(right[i])));
  });
}

template <typename Element>
void reduceAs(void* dst, const void* a, const void* b, size_t count, weftRedOp_t op) {
  switch (op) {
    case weftSum:
    case weftAvg:  // the sum; divide() finishes the average
      return reduceLoop<Element, SumOp>(dst, a, b, count);
    case weftProd:
      return reduceLoop<Element, ProdOp>(dst, a, b, count);
    case weftMax:
      return reduceLoop<Element, MaxOp>(dst, a, b, count);
    case weftMin:
      return reduceLoop<Element, MinOp>(dst, a, b, count);
    case weftNumOps:
    case weftMaxRedOp:
      return;
  }
}

// Truncates toward zero like C++'s `/`. Signed values divide their magnitude, so that every
// uint64_t divisor is defined (INT64_MIN included).
template <typename T>
T divideTowardZero(T value, uint64_t divisor) {
  if constexpr (std::is_signed_v<T>) {
    const uint64_t bits = static_cast<uint64_t>(value);
    const uint64_t quotient = (value < 0 ? 0 - bits : bits) / divisor;
    return static_cast<T>(value < 0 ? 0 - quotient : quotient);
  } else {
    return static_cast<T>(value / divisor);
  }
}

template <typename Element>
void divideAs(void* dst, const void* src, size_t count, uint64_t divisor) {
  using Storage = typename Element::Storage;
  using Compute = typename Element::Compute;
  Storage* out = static_cast<Storage*>(dst);
  const Storage* in = static_cast<const Storage*>(src);
  if constexpr (std::is_integral_v<Compute>) {
    for (size_t i = 0; i < count; ++i) out[i] = divideTowardZero(in[i], divisor);
  } else {
    const Compute floatDivisor = static_cast<Compute>(divisor);
    forEachIndex(count, [=](size_t i) {
      out[i] = Element::store(Element::load(in[i]) / floatDivisor);
    });
  }
}

// out = in * scalar, the scalar stored as one element of the same type (PreMulSum's first step).
template <typename Element>
void scaleAs(void* dst, const void* src, size_t count, const void* scalar) {
  using Storage = typename Element::Storage;
  Storage* out = static_cast<Storage*>(dst);
  const Storage* in = static_cast<const Storage*>(src);
  Storage stored;
  std::memcpy(&stored, scalar, sizeof(stored));
  const auto factor = Element::load(stored);
  forEachIndex(count, [=](size_t i) { out[i] = Element::store(ProdOp::apply(Element::load(in[i]), factor)); });
}

// Calls Fn::template run<Element>(args...) for the element description of `type`.
template <typename Fn, typename... Args>
void dispatchOnType(weftDataType_t type, Args... args) {
  switch (type) {
    case weftInt8: return Fn::template run<NativeElement<int8_t>>(args...);
    case weftUint8: return Fn::template run<NativeElement<uint8_t>>(args...);
    case weftInt32: return Fn::template run<NativeElement<int32_t>>(args...);
    case weftUint32: return Fn::template run<NativeElement<uint32_t>>(args...);
    case weftInt64: return Fn::template run<NativeElement<int64_t>>(args...);
    case weftUint64: return Fn::template run<NativeElement<uint64_t>>(args...);
    case weftFloat16: return Fn::template run<HalfElement>(args...);
    case weftFloat32: return Fn::template run<NativeElement<float>>(args...);
    case weftFloat64: return Fn::template run<NativeElement<double>>(args...);
    case weftBfloat16: return Fn::template run<Bf16Element>(args...);
    case weftFloat8e4m3: return Fn::template run<Fp8E4M3Element>(args...);
    case weftFloat8e5m2: return Fn::template run<Fp8E5M2Element>(args...);
    case weftNumTypes: return;
  }
}

struct ReduceFn {
  template <typename Element>
  static void run(void* dst, const void* a, const void* b, size_t count, weftRedOp_t op) {
    reduceAs<Element>(dst, a, b, count, op);
  }
};

struct DivideFn {
  template <typename Element>
  static void run(void* dst, const void* src, size_t count, uint64_t divisor) {
    divideAs<Element>(dst, src, count, divisor);
  }
};

struct ScaleFn {
  template <typename Element>
  static void run(void* dst, const void* src, size_t count, const void* scalar) {
    scaleAs<Element>(dst, src, count, scalar);
  }
};

}  // namespace

void reduceScalar(void* dst, const void* a, const void* b, size_t count, weftDataType_t type,
                  weftRedOp_t op) {
  dispatchOnType<ReduceFn>(type, dst, a, b, count, op);
}

void divideScalar(void* dst, const void* src, size_t count, weftDataType_t type,
                  uint64_t divisor) {
  if (divisor == 0) return;
  dispatchOnType<DivideFn>(type, dst, src, count, divisor);
}

void scaleScalar(void* dst, const void* src, size_t count, weftDataType_t type, const void* scalar) {
  dispatchOnType<ScaleFn>(type, dst, src, count, scalar);
}

void reduceManyScalar(const ReduceMany& call) {
  const size_t element = dataTypeSize(call.type);
  if (element == 0 || call.inCount < 1 || call.outCount < 1) return;
  constexpr size_t kTileBytes = 4096;
  alignas(64) char tile[kTileBytes];
  const size_t perTile = kTileBytes / element;
  auto at = [&](const void* base, size_t i) { return static_cast<const char*>(base) + i * element; };
  for (size_t i = 0; i < call.count; i += perTile) {
    const size_t n = std::min(perTile, call.count - i);
    if (call.inCount == 1) std::memcpy(tile, at(call.ins[0], i), n * element);
    if (call.inCount > 1) reduceScalar(tile, at(call.ins[0], i), at(call.ins[1], i), n, call.type, call.op);
    for (int k = 2; k < call.inCount; ++k) reduceScalar(tile, tile, at(call.ins[k], i), n, call.type, call.op);
    for (int o = 0; o < call.outCount; ++o) {
      char* out = static_cast<char*>(call.outs[o]) + i * element;
      if (call.streaming) {
        copyStreaming(out, tile, n * element);
      } else {
        std::memcpy(out, tile, n * element);
      }
    }
  }
}

}  // namespace weft::kernels
