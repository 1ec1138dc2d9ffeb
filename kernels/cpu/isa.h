// Which instruction set the host reduction kernels use, and calls into a specific one (for
// tests and benchmarks). reduce() and divide() use the best implementation this CPU supports,
// chosen once on first use; WEFT_CPU_ISA=scalar|avx2|avx512|avx512bf16 picks another. Here an
// unknown or unsupported value falls back to the best; communicator init rejects an unknown
// name and warns about one this CPU cannot run.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/reduce.h"
#include "weft/weft.h"

namespace weft::kernels {

// Every implementation built in, from the portable fallback up. "avx512bf16" is "avx512"
// rounding bfloat16 results with the AVX512-BF16 instructions.
inline constexpr const char* kCpuIsas[] = {"scalar", "avx2", "avx512", "avx512bf16"};

// Whether isa is one of kCpuIsas and this CPU (and OS) can run it.
bool isaSupported(const char* isa);

// The implementation reduce() and divide() use in this process.
const char* activeIsa();

// The implementation chosen for a WEFT_CPU_ISA value (nullptr: unset): that ISA when it is
// supported, else the best supported one.
const char* selectIsa(const char* requested);

// reduce() and divide() with the named implementation. Return false, doing nothing, when it
// is unknown or unsupported.
bool reduceWithIsa(const char* isa, void* dst, const void* a, const void* b, size_t count,
                   weftDataType_t type, weftRedOp_t op);
bool divideWithIsa(const char* isa, void* dst, const void* src, size_t count,
                   weftDataType_t type, uint64_t divisor);
bool reduceManyWithIsa(const char* isa, const ReduceMany& call);

}  // namespace weft::kernels
