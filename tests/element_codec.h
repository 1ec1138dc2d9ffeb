// Test-side encoding of values into every Weft datatype, and expected all-reduce results
// computed independently of the library's kernels (exact small-integer data, so every format
// represents inputs and results exactly, except Avg of floats, which is compared within rounding).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/float_formats.h"
#include "weft/weft.h"

namespace weft::test {

inline size_t typeSize(weftDataType_t t) {
  static const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  auto index = static_cast<size_t>(t);
  return index < sizeof(sizes) / sizeof(sizes[0]) ? sizes[index] : 0;
}

inline bool isFloatType(weftDataType_t t) {
  return t == weftFloat16 || t == weftFloat32 || t == weftFloat64 || t == weftBfloat16 || t == weftFloat8e4m3 ||
         t == weftFloat8e5m2;
}

inline bool isSignedType(weftDataType_t t) { return t == weftInt8 || t == weftInt32 || t == weftInt64; }

// Stores v (an integer value for int types; any double for float types) at element i.
inline void storeValue(void* buf, size_t i, weftDataType_t t, double v) {
  char* p = static_cast<char*>(buf) + i * typeSize(t);
  auto asInt = static_cast<int64_t>(v);
  switch (t) {
    case weftInt8: case weftUint8: { auto x = static_cast<uint8_t>(asInt); std::memcpy(p, &x, 1); break; }
    case weftInt32: case weftUint32: { auto x = static_cast<uint32_t>(asInt); std::memcpy(p, &x, 4); break; }
    case weftInt64: case weftUint64: { auto x = static_cast<uint64_t>(asInt); std::memcpy(p, &x, 8); break; }
    case weftFloat16: { uint16_t x = kernels::floatToHalf(static_cast<float>(v)); std::memcpy(p, &x, 2); break; }
    case weftBfloat16: { uint16_t x = kernels::floatToBf16(static_cast<float>(v)); std::memcpy(p, &x, 2); break; }
    case weftFloat32: { auto x = static_cast<float>(v); std::memcpy(p, &x, 4); break; }
    case weftFloat64: std::memcpy(p, &v, 8); break;
    case weftFloat8e4m3: { uint8_t x = kernels::floatToFp8e4m3(static_cast<float>(v)); std::memcpy(p, &x, 1); break; }
    case weftFloat8e5m2: { uint8_t x = kernels::floatToFp8e5m2(static_cast<float>(v)); std::memcpy(p, &x, 1); break; }
    default: break;
  }
}

// Reads element i: floats as their value, integers as the raw bits widened (compare raw).
inline double loadFloat(const void* buf, size_t i, weftDataType_t t) {
  const char* p = static_cast<const char*>(buf) + i * typeSize(t);
  switch (t) {
    case weftFloat16: { uint16_t x; std::memcpy(&x, p, 2); return kernels::halfToFloat(x); }
    case weftBfloat16: { uint16_t x; std::memcpy(&x, p, 2); return kernels::bf16ToFloat(x); }
    case weftFloat32: { float x; std::memcpy(&x, p, 4); return x; }
    case weftFloat64: { double x; std::memcpy(&x, p, 8); return x; }
    case weftFloat8e4m3: return kernels::fp8e4m3ToFloat(static_cast<uint8_t>(*p));
    case weftFloat8e5m2: return kernels::fp8e5m2ToFloat(static_cast<uint8_t>(*p));
    default: return 0;
  }
}

inline uint64_t loadBits(const void* buf, size_t i, weftDataType_t t) {
  uint64_t x = 0;
  std::memcpy(&x, static_cast<const char*>(buf) + i * typeSize(t), typeSize(t));
  return x;
}

inline uint64_t widthMask(weftDataType_t t) {
  return typeSize(t) == 8 ? ~0ull : (1ull << (8 * typeSize(t))) - 1;
}

// The input of `rank` (of nranks) at element i for op: small integers every format holds
// exactly, and for float Avg multiples of nranks, so that inputs divided first (narrow floats,
// as NCCL) and sums divided last (the others) are both exact.
inline double inputValue(weftDataType_t t, weftRedOp_t op, int rank, int nranks, size_t i) {
  auto k = static_cast<int64_t>((static_cast<uint64_t>(rank) * 7 + i * 13) % 17);
  bool isSigned = isSignedType(t) || isFloatType(t);
  switch (op) {
    case weftProd: return isSigned ? static_cast<double>(k % 3 - 1) : static_cast<double>(1 + k % 2);
    case weftMax:
    case weftMin: return isSigned ? static_cast<double>(k - 8) : static_cast<double>(k);
    default:  // Sum, Avg: keep every partial sum of up to 8 ranks exact in fp8 e5m2
      if (isFloatType(t)) return static_cast<double>(k % 2) * (op == weftAvg ? nranks : 1);
      return isSigned ? static_cast<double>(k - 8) : static_cast<double>(k);
  }
}

// Checks element `at` of buf against the reduction over ranks of their element i (the inputs
// from inputValue); returns false on mismatch.
inline bool reducedMatches(const void* buf, size_t at, size_t i, weftDataType_t t, weftRedOp_t op, int nranks) {
  if (isFloatType(t)) {
    double expect = op == weftProd ? 1 : op == weftMax ? -1e300 : op == weftMin ? 1e300 : 0;
    for (int r = 0; r < nranks; ++r) {
      double v = inputValue(t, op, r, nranks, i);
      if (op == weftProd) expect *= v;
      else if (op == weftMax) expect = std::max(expect, v);
      else if (op == weftMin) expect = std::min(expect, v);
      else expect += v;
    }
    if (op == weftAvg) expect /= nranks;
    return loadFloat(buf, at, t) == expect;
  }
  // Integers: exact modular arithmetic in the type's width, independent of the library.
  uint64_t mask = widthMask(t);
  auto signExtend = [&](uint64_t x) -> int64_t {
    if (typeSize(t) == 8) return static_cast<int64_t>(x);
    uint64_t signBit = 1ull << (8 * typeSize(t) - 1);
    return static_cast<int64_t>((x ^ signBit) - signBit);
  };
  uint64_t acc = op == weftProd ? 1 : 0;
  for (int r = 0; r < nranks; ++r) {
    uint64_t v = static_cast<uint64_t>(static_cast<int64_t>(inputValue(t, op, r, nranks, i))) & mask;
    if (r == 0 && (op == weftMax || op == weftMin)) { acc = v; continue; }
    if (op == weftProd) acc = (acc * v) & mask;
    else if (op == weftMax) acc = isSignedType(t) ? (signExtend(v) > signExtend(acc) ? v : acc) : std::max(acc, v);
    else if (op == weftMin) acc = isSignedType(t) ? (signExtend(v) < signExtend(acc) ? v : acc) : std::min(acc, v);
    else acc = (acc + v) & mask;
  }
  if (op == weftAvg) {
    acc = isSignedType(t) ? static_cast<uint64_t>(signExtend(acc) / nranks) & mask : acc / static_cast<uint64_t>(nranks);
  }
  return loadBits(buf, at, t) == acc;
}

// Checks the all-reduce result at element i; returns false on mismatch.
inline bool resultMatches(const void* buf, size_t i, weftDataType_t t, weftRedOp_t op, int nranks) {
  return reducedMatches(buf, i, i, t, op, nranks);
}

}  // namespace weft::test
