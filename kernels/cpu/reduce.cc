// reduce() and divide() dispatch to the best implementation this CPU supports (reduce_impl.h),
// chosen once on first use; WEFT_CPU_ISA overrides the choice (isa.h). Every implementation
// follows the semantics documented in reduce.h and reduce_scalar.cc bit for bit.
#include "kernels/cpu/reduce.h"

#include <cstdlib>
#include <iterator>
#include <cstring>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/reduce_impl.h"

namespace weft::kernels {
namespace {

#if defined(__x86_64__) || defined(__i386__)
#define WEFT_X86 1
#include <cpuid.h>
#else
#define WEFT_X86 0
#endif

// F16C through CPUID leaf 1 (clang 14's __builtin_cpu_supports does not know "f16c"); AVX2's
// check below already covers the OS saving the YMM registers. Read once: in a VM, CPUID traps
// to the hypervisor, tens of microseconds that every *WithIsa call would otherwise pay.
bool cpuHasF16c() {
#if WEFT_X86
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  }();
  return has;
#else
  return false;
#endif
}

// __builtin_cpu_supports also checks that the OS saves the wider registers (XCR0).
bool cpuHasAvx2() {
#if WEFT_X86
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpuHasF16c();
#else
  return false;
#endif
}

bool cpuHasAvx512() {
#if WEFT_X86
  __builtin_cpu_init();
  return cpuHasAvx2() && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}

bool cpuHasAvx512Bf16() {
#if WEFT_X86
  return cpuHasAvx512() && __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

bool always() { return true; }

struct Isa {
  const char* name;
  ReduceImpl reduce;
  ReduceManyImpl reduceMany;
  DivideImpl divide;
  bool (*supported)();
};

// In the order of kCpuIsas, from the fallback up.
const Isa kIsas[] = {
    {"scalar", reduceScalar, reduceManyScalar, divideScalar, always},
    {"avx2", reduceAvx2, reduceManyAvx2, divideAvx2, cpuHasAvx2},
    {"avx512", reduceAvx512, reduceManyAvx512, divideAvx512, cpuHasAvx512},
    {"avx512bf16", reduceAvx512Bf16, reduceManyAvx512, divideAvx512Bf16, cpuHasAvx512Bf16},
};
static_assert(std::size(kIsas) == std::size(kCpuIsas));

// The named ISA if it is known and supported, else nullptr.
const Isa* findSupported(const char* name) {
  if (name == nullptr) return nullptr;
  for (const Isa& isa : kIsas) {
    if (std::strcmp(isa.name, name) == 0) return isa.supported() ? &isa : nullptr;
  }
  return nullptr;
}

const Isa& select(const char* requested) {
  if (const Isa* isa = findSupported(requested)) return *isa;
  for (size_t i = std::size(kIsas); i-- > 1;) {
    if (kIsas[i].supported()) return kIsas[i];
  }
  return kIsas[0];
}

// Chosen on first use; a function-local static is initialised once, thread-safely.
const Isa& active() {
  static const Isa& isa = select(std::getenv("WEFT_CPU_ISA"));
  return isa;
}

}  // namespace

bool isaSupported(const char* isa) { return findSupported(isa) != nullptr; }

const char* activeIsa() { return active().name; }

const char* selectIsa(const char* requested) { return select(requested).name; }

bool reduceWithIsa(const char* isa, void* dst, const void* a, const void* b, size_t count,
                   weftDataType_t type, weftRedOp_t op) {
  const Isa* found = findSupported(isa);
  if (found == nullptr) return false;
  found->reduce(dst, a, b, count, type, op);
  return true;
}

bool reduceManyWithIsa(const char* isa, const ReduceMany& call) {
  const Isa* found = findSupported(isa);
  if (found == nullptr) return false;
  found->reduceMany(call);
  return true;
}

bool divideWithIsa(const char* isa, void* dst, const void* src, size_t count,
                   weftDataType_t type, uint64_t divisor) {
  const Isa* found = findSupported(isa);
  if (found == nullptr) return false;
  found->divide(dst, src, count, type, divisor);
  return true;
}

void reduce(void* dst, const void* a, const void* b, size_t count, weftDataType_t type,
            weftRedOp_t op) {
  active().reduce(dst, a, b, count, type, op);
}

void reduceMany(const ReduceMany& call) { active().reduceMany(call); }

void divide(void* dst, const void* src, size_t count, weftDataType_t type, uint64_t divisor) {
  active().divide(dst, src, count, type, divisor);
}

void scale(void* dst, const void* src, size_t count, weftDataType_t type, const void* scalar) {
  scaleScalar(dst, src, count, type, scalar);
}

bool isValidDataType(int type) { return type >= 0 && type < weftNumTypes; }

bool isNarrowFloat(weftDataType_t type) {
  return type == weftFloat16 || type == weftBfloat16 || type == weftFloat8e4m3 || type == weftFloat8e5m2;
}

const char* dataTypeName(weftDataType_t type) {
  switch (type) {
    case weftInt8: return "int8";
    case weftUint8: return "uint8";
    case weftInt32: return "int32";
    case weftUint32: return "uint32";
    case weftInt64: return "int64";
    case weftUint64: return "uint64";
    case weftFloat16: return "half";
    case weftFloat32: return "float";
    case weftFloat64: return "double";
    case weftBfloat16: return "bfloat16";
    case weftFloat8e4m3: return "f8e4m3";
    case weftFloat8e5m2: return "f8e5m2";
    case weftNumTypes: break;
  }
  return "invalid";
}

const char* redOpName(weftRedOp_t op) {
  switch (op) {
    case weftSum: return "sum";
    case weftProd: return "prod";
    case weftMax: return "max";
    case weftMin: return "min";
    case weftAvg: return "avg";
    case weftNumOps: case weftMaxRedOp: break;
  }
  return "invalid";
}

}  // namespace weft::kernels
