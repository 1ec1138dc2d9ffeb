#include "gpu/device_memory.h"

#if WEFT_HAVE_GPU
#include <dlfcn.h>

#include <atomic>

#include "kernels/gpu/gpu_runtime.h"
#endif
#include "util/status.h"

namespace weft::gpu {

#if WEFT_HAVE_GPU

bool builtWithGpu() { return true; }

namespace {

// Whether the process has loaded the GPU driver. Memory can be device memory only then, and
// asking the runtime earlier would load the driver and make a context in every host-only
// process (file descriptors and threads it never asked for). HIP's runtime is the driver.
bool driverLoaded() {
#if defined(WEFT_GPU_HIP)
  return true;
#else
  static std::atomic<bool> loaded{false};
  if (loaded.load(std::memory_order_relaxed)) return true;
  void* driver = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (driver == nullptr) return false;
  ::dlclose(driver);  // the reference NOLOAD took; the library stays
  loaded.store(true, std::memory_order_relaxed);
  return true;
#endif
}

}  // namespace

// Asked once the driver is there: a process without a device then pays nothing per call.
int deviceCount(bool loadDriver) {
  static std::atomic<int> cached{-1};
  if (int known = cached.load(std::memory_order_relaxed); known >= 0) return known;
  if (!loadDriver && !driverLoaded()) return 0;
  int n = 0;
  if (gpuGetDeviceCount(&n) != gpuSuccess) {
    (void)gpuGetLastError();
    n = 0;
  }
  cached.store(n, std::memory_order_relaxed);
  return n;
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
int deviceCount(bool) { return 0; }
int currentDevice() { return -1; }
bool isDeviceMemory(const void*, int*) { return false; }
Status runtimeError(int error, const std::string& what) {
  return Status(weftUnhandledCudaError, formatString("%s: GPU runtime error %d", what.c_str(), error));
}

#endif

}  // namespace weft::gpu
