// Element-wise reductions on host memory for every weftDataType_t x weftRedOp_t.
#pragma once

#include <cstddef>
#include <cstdint>

#include "weft/weft.h"

namespace weft::kernels {

// Bytes per element; 0 for an invalid type. Inline: every call asks it several times.
inline size_t dataTypeSize(weftDataType_t type) {
  switch (type) {
    case weftInt8: case weftUint8: case weftFloat8e4m3: case weftFloat8e5m2: return 1;
    case weftFloat16: case weftBfloat16: return 2;
    case weftInt32: case weftUint32: case weftFloat32: return 4;
    case weftInt64: case weftUint64: case weftFloat64: return 8;
    case weftNumTypes: break;
  }
  return 0;
}
bool isValidDataType(int type);
const char* dataTypeName(weftDataType_t type);
const char* redOpName(weftRedOp_t op);
// Half, bfloat16 and the fp8 types: floats narrower than float, computed in float.
bool isNarrowFloat(weftDataType_t type);

// dst[i] = a[i] op b[i] for i < count, where op is Sum, Prod, Max or Min (Avg reduces as Sum and
// is finished by divide()). dst may alias a or b exactly. Half, bfloat16 and fp8 are computed in
// float and rounded to nearest even; fp8 saturates to the largest finite value on overflow.
// Integer Sum and Prod wrap; float Max and Min return NaN if either input is NaN. An invalid
// type or op does nothing (callers validate).
// Runs the best implementation this CPU supports (SIMD where it can; see isa.h), every one
// bit-identical to the portable reference but for NaN payloads.
void reduce(void* dst, const void* a, const void* b, size_t count, weftDataType_t type,
            weftRedOp_t op);

// One pass that reduces several inputs into several outputs: for i < count, every outs[o][i] =
// ins[0][i] op ins[1][i] op ... op ins[inCount - 1][i], reduced left to right exactly as a chain
// of reduce() calls would (so bit for bit the same), with op as for reduce(). Each input is read
// once and each output written once: a few cache lines of each at a time, all inputs before any
// output, so an output may be one of the inputs exactly. inCount >= 1 (1 copies), outCount >= 0.
// With `streaming`, outputs are written around the caches (kernels/cpu/copy_streaming.h) where
// they all share one alignment to 64 bytes, else with plain stores; either way the stores are
// complete (fenced) on return.
struct ReduceMany {
  void* const* outs;
  int outCount;
  const void* const* ins;
  int inCount;
  size_t count;
  weftDataType_t type;
  weftRedOp_t op;
  bool streaming;
};
void reduceMany(const ReduceMany& call);

// dst[i] = src[i] / divisor (Avg's last step). Integer types truncate toward zero, like NCCL.
// dst may alias src exactly. Floats divide in float (double for Float64) and round back.
// divisor is never 0 (the rank count); 0 does nothing.
void divide(void* dst, const void* src, size_t count, weftDataType_t type, uint64_t divisor);

// dst[i] = src[i] * scalar, where scalar points at one element of `type` (PreMulSum). Integers
// wrap; narrow floats multiply in float and round to nearest even. dst may alias src exactly.
void scale(void* dst, const void* src, size_t count, weftDataType_t type, const void* scalar);

}  // namespace weft::kernels
