// Internal: the per-ISA implementations behind reduce() and divide(). Each has the signature
// and semantics of the public function it implements (see reduce.h and reduce_scalar.cc);
// reduce.cc picks one at run time. Only call an ISA's functions on a CPU that supports it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/reduce.h"
#include "weft/weft.h"

namespace weft::kernels {

using ReduceImpl = void (*)(void* dst, const void* a, const void* b, size_t count,
                            weftDataType_t type, weftRedOp_t op);
using ReduceManyImpl = void (*)(const ReduceMany& call);
using DivideImpl = void (*)(void* dst, const void* src, size_t count, weftDataType_t type,
                            uint64_t divisor);

// Portable C++, the reference every other implementation must match bit for bit.
void reduceScalar(void* dst, const void* a, const void* b, size_t count, weftDataType_t type,
                  weftRedOp_t op);
void divideScalar(void* dst, const void* src, size_t count, weftDataType_t type,
                  uint64_t divisor);
// reduceMany by reduceScalar a few KiB at a time through a buffer on the stack.
void reduceManyScalar(const ReduceMany& call);
// Only portable: the compiler vectorizes it, and it runs once per PreMulSum input.
void scaleScalar(void* dst, const void* src, size_t count, weftDataType_t type, const void* scalar);

// AVX2 with FMA and F16C.
void reduceAvx2(void* dst, const void* a, const void* b, size_t count, weftDataType_t type,
                weftRedOp_t op);
void divideAvx2(void* dst, const void* src, size_t count, weftDataType_t type, uint64_t divisor);
void reduceManyAvx2(const ReduceMany& call);

// AVX-512 F, BW, VL and DQ.
void reduceAvx512(void* dst, const void* a, const void* b, size_t count, weftDataType_t type,
                  weftRedOp_t op);
void divideAvx512(void* dst, const void* src, size_t count, weftDataType_t type,
                  uint64_t divisor);
// Also avx512bf16's: its bfloat16 results are bit-identical to these.
void reduceManyAvx512(const ReduceMany& call);

// The AVX-512 set plus AVX512-BF16, whose conversion instructions round bfloat16 results.
void reduceAvx512Bf16(void* dst, const void* a, const void* b, size_t count,
                      weftDataType_t type, weftRedOp_t op);
void divideAvx512Bf16(void* dst, const void* src, size_t count, weftDataType_t type,
                      uint64_t divisor);

}  // namespace weft::kernels
