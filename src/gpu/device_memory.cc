#include "gpu/device_memory.h"

#if WEFT_HAVE_GPU
#include "kernels/gpu/gpu_runtime.h"
#endif
#include "util/status.h"

namespace weft::gpu {

#if WEFT_HAVE_GPU

bool builtWithGpu() { return true; }

// Asked once: a process without a driver or a device then pays nothing per call.
int deviceCount() {
  static const int count = [] {
    int n = 0;
    if (gpuGetDeviceCount(&n) != gpuSuccess) {
      (void)gpuGetLastError();
      return 0;
    }
    return n;
  }();
  return count;
}

int currentDevice() {
  int device = -1;
  if (deviceCount() == 0 || gpuGetDevice(&device) != gpuSuccess) {
    (void)gpuGetLastError();  // no driver or no device: a host-only process
    return -1;
  }
  return device;
}

bool isDeviceMemory(const void* ptr, int* device) {
  if (deviceCount() == 0) return false;
  int where = -1;
  if (gpuMemoryKindOf(ptr, &where) == GpuMemoryKind::Host) return false;
  *device = where;
  return true;
}

Status runtimeError(int error, const std::string& what) {
  return Status(weftUnhandledCudaError, formatString("%s: %s error %d: %s", what.c_str(), WEFT_GPU_RUNTIME_NAME, error,
                                                     gpuGetErrorString(static_cast<gpuError_t>(error))));
}

#else

bool builtWithGpu() { return false; }
int deviceCount() { return 0; }
int currentDevice() { return -1; }
bool isDeviceMemory(const void*, int*) { return false; }
Status runtimeError(int error, const std::string& what) {
  return Status(weftUnhandledCudaError, formatString("%s: GPU runtime error %d", what.c_str(), error));
}

#endif

}  // namespace weft::gpu
