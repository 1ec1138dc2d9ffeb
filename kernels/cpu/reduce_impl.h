// Internal: the per-ISA implementations behind reduce() and divide(). Each has the signature
// and semantics of the public function it implements (see reduce.h and reduce_scalar.cc);
// reduce.cc picks one at run time. Only call an ISA's functions on a CPU that supports it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "weft/weft.h"

namespace weft::kernels {

using ReduceImpl = void (*)(void* dst, const void* a, const void* b, size_t count,
                            weftDataType_t type, weftRedOp_t op);
using DivideImpl = void (*)(void* dst, const void* src, size_t count, weftDataType_t type,
                            uint64_t divisor);

// Portable C++, the reference every other implementation must match bit for bit.
void reduceScalar(void* dst, const void* a, const void* b, size_t count, weftDataType_t type,
                  weftRedOp_t op);
void divideScalar(void* dst, const void* src, size_t count, weftDataType_t type,
                  uint64_t divisor);
// Only portable: the compiler vectorizes it, and it runs once per PreMulSum input.
void scaleScalar(void* dst, const void* src, size_t count, weftDataType_t type, const void* scalar);

// AVX2 with FMA and F16C.
void reduceAvx2(void* dst, const void* a, const void* b, size_t count, weftDataType_t type,
                weftRedOp_t op);
void divideAvx2(void* dst, const void* src, size_t count, weftDataType_t type, uint64_t divisor);

// AVX-512 F, BW, VL and DQ.
void reduceAvx512(void* dst, const void* a, const void* b, size_t count, weftDataType_t type,
                  weftRedOp_t op);
void divideAvx512(void* dst, const void* src, size_t count, weftDataType_t type,
                  uint64_t divisor);

// The AVX-512 set plus AVX512-BF16, whose conversion instructions round bfloat16 results.
void reduceAvx512Bf16(void* dst, const void* a, const void* b, size_t count,
                      weftDataType_t type, weftRedOp_t op);
void divideAvx512Bf16(void* dst, const void* src, size_t count, weftDataType_t type,
                      uint64_t divisor);

}  // namespace weft::kernels
