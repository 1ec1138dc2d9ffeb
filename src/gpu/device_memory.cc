#include "gpu/device_memory.h"

#if WEFT_HAVE_GPU
#include <link.h>
#include <time.h>

#include <atomic>
#include <cstddef>
#include <cstring>

#include "kernels/gpu/gpu_runtime.h"
#endif
#include "util/status.h"

namespace weft::gpu {

#if WEFT_HAVE_GPU

bool builtWithGpu() { return true; }

namespace {

#if !defined(WEFT_GPU_HIP)
// Whether the process has loaded the GPU driver. Memory can be device memory only then, and
// asking the runtime earlier would load the driver and make a context in every host-only
// process (file descriptors and threads it never asked for). HIP's runtime is the driver.
//
// Every collective asks, so the answer must cost no system call: the loaded objects are read
// from the dynamic loader's list (dlopen with RTLD_NOLOAD would search the library path on
// disk each time, about 100 us), and not even that while the loader's count of objects ever
// loaded stays where it was at the last look.
bool lookForDriver() {
  static std::atomic<unsigned long long> lookedAt{0};
  struct Look {
    unsigned long long lookedAt;
    unsigned long long adds = 0;
    bool first = true;
    bool found = false;
  } look{lookedAt.load(std::memory_order_relaxed)};
  ::dl_iterate_phdr(
      [](dl_phdr_info* info, size_t size, void* data) -> int {
        auto* l = static_cast<Look*>(data);
        if (l->first) {
          l->first = false;
          if (size >= offsetof(dl_phdr_info, dlpi_adds) + sizeof(info->dlpi_adds)) {
            l->adds = info->dlpi_adds;
            if (l->adds == l->lookedAt) return 1;  // nothing loaded since
          }
        }
        const char* slash = info->dlpi_name ? std::strrchr(info->dlpi_name, '/') : nullptr;
        const char* base = slash ? slash + 1 : info->dlpi_name;
        l->found = base != nullptr && std::strncmp(base, "libcuda.so", 10) == 0;
        return l->found ? 1 : 0;
      },
      &look);
  if (!look.found && look.adds != 0) lookedAt.store(look.adds, std::memory_order_relaxed);
  return look.found;
}
#endif

// Even the loader's list costs a small all-reduce an eighth of its instructions (its lock, and
// finding the caller's namespace), so a look that found no driver stands for one tick of the
// coarse clock (1-10 ms, read from the vDSO without a system call). That cannot hide device
// memory: between the driver's loading and the first device buffer a process initializes the
// driver and makes a context, which takes tens of milliseconds at the least.
bool driverLoaded() {
#if defined(WEFT_GPU_HIP)
  return true;
#else
  static std::atomic<bool> loaded{false};
  static std::atomic<long long> absentAt{-1};  // the coarse clock's reading at the last look
  if (loaded.load(std::memory_order_relaxed)) return true;
  timespec now{};
  const bool clockRead = ::clock_gettime(CLOCK_MONOTONIC_COARSE, &now) == 0;  // else look every time
  const long long tick = static_cast<long long>(now.tv_sec) * 1000000000LL + now.tv_nsec;
  if (clockRead && tick == absentAt.load(std::memory_order_relaxed)) return false;
  if (lookForDriver()) {
    loaded.store(true, std::memory_order_relaxed);
    return true;
  }
  if (clockRead) absentAt.store(tick, std::memory_order_relaxed);
  return false;
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

std::string pciBusId(int device) {
  char busId[64] = {};
  if (device < 0 || gpuDeviceGetPCIBusId(busId, sizeof(busId), device) != gpuSuccess) {
    (void)gpuGetLastError();
    return "";
  }
  return busId;
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
std::string pciBusId(int) { return ""; }
bool isDeviceMemory(const void*, int*) { return false; }
Status runtimeError(int error, const std::string& what) {
  return Status(weftUnhandledCudaError, formatString("%s: GPU runtime error %d", what.c_str(), error));
}

#endif

}  // namespace weft::gpu
