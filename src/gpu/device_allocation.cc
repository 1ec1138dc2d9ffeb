#include "gpu/device_allocation.h"

#include "gpu/device_memory.h"
#include "kernels/gpu/gpu_runtime.h"

#if !defined(WEFT_GPU_HIP)
#include <cuda.h>  // types only: the entry points come from the runtime (no libcuda at link time)

#include "gpu/driver_entry_point.h"
#endif

namespace weft::gpu {

#if defined(WEFT_GPU_HIP)

Result<DeviceAllocation> allocationOf(const void* ptr) {
  auto address = reinterpret_cast<hipDeviceptr_t>(const_cast<void*>(ptr));
  hipDeviceptr_t base{};
  size_t bytes = 0;
  unsigned long long id = 0;
  hipError_t err = hipMemGetAddressRange(&base, &bytes, address);
  if (err == hipSuccess) err = hipPointerGetAttribute(&id, HIP_POINTER_ATTRIBUTE_BUFFER_ID, address);
  if (err != hipSuccess) {
    (void)hipGetLastError();
    return runtimeError(err, "looking up the buffer's allocation");
  }
  return DeviceAllocation{reinterpret_cast<uintptr_t>(base), bytes, id};
}

#else

namespace {

using GetAddressRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
using PointerGetAttribute = CUresult (*)(void*, CUpointer_attribute, CUdeviceptr);

}  // namespace

Result<DeviceAllocation> allocationOf(const void* ptr) {
  static const auto getRange = reinterpret_cast<GetAddressRange>(driverEntryPoint("cuMemGetAddressRange"));
  static const auto getAttribute = reinterpret_cast<PointerGetAttribute>(driverEntryPoint("cuPointerGetAttribute"));
  if (getRange == nullptr || getAttribute == nullptr) {
    return Status(weftUnhandledCudaError, "the CUDA driver offers no cuMemGetAddressRange or cuPointerGetAttribute");
  }
  const auto address = reinterpret_cast<CUdeviceptr>(ptr);
  CUdeviceptr base = 0;
  size_t bytes = 0;
  unsigned long long id = 0;
  CUresult r = getRange(&base, &bytes, address);
  if (r == CUDA_SUCCESS) r = getAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, address);
  if (r != CUDA_SUCCESS) {
    return Status(weftUnhandledCudaError,
                  formatString("looking up the buffer's allocation: CUDA driver error %d", static_cast<int>(r)));
  }
  return DeviceAllocation{static_cast<uintptr_t>(base), bytes, id};
}

#endif

}  // namespace weft::gpu
