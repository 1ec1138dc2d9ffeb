#include "gpu/driver_entry_point.h"

#if !defined(WEFT_GPU_HIP)
#include "kernels/gpu/gpu_runtime.h"

namespace weft::gpu {

void* driverEntryPoint(const char* name) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return p;
}

}  // namespace weft::gpu
#endif
