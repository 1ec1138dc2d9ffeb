#include "device_buffers.h"

#include <cstdlib>
#include <new>
#include <stdexcept>

#if WEFT_HAVE_GPU
#include "kernels/gpu/gpu_runtime.h"
#endif

namespace weftperf::gpu {

#if WEFT_HAVE_GPU

namespace {

void check(gpuError_t err, const char* what) {
  if (err != gpuSuccess) throw std::runtime_error(std::string(what) + ": " + gpuGetErrorString(err));
}

int localRank() {
  for (const char* name : {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}) {
    if (const char* value = std::getenv(name)) return std::atoi(value);
  }
  return 0;
}

}  // namespace

bool available() { return true; }

bool selectDevice(std::string* error) {
  int count = 0;
  if (gpuGetDeviceCount(&count) != gpuSuccess || count == 0) {
    *error = "--gpu: no GPU is visible to this process";
    return false;
  }
  if (gpuError_t err = gpuSetDevice(localRank() % count); err != gpuSuccess) {
    *error = std::string("--gpu: cannot select a GPU: ") + gpuGetErrorString(err);
    return false;
  }
  return true;
}

void* allocate(size_t bytes) {
  void* p = nullptr;
  if (gpuMalloc(&p, bytes > 0 ? bytes : 1) != gpuSuccess) throw std::bad_alloc();
  return p;
}

void release(void* device) { (void)gpuFree(device); }
// Waits for the device: from pageable memory the copy may return before its DMA lands, and the
// calls run on a non-blocking stream.
void toDevice(void* device, const void* host, size_t bytes) {
  check(gpuMemcpy(device, host, bytes, gpuMemcpyHostToDevice), "copy to the GPU");
  check(gpuDeviceSynchronize(), "copy to the GPU");
}
void toHost(void* host, const void* device, size_t bytes) { check(gpuMemcpy(host, device, bytes, gpuMemcpyDeviceToHost), "copy from the GPU"); }

void fill(void* device, unsigned char byte, size_t bytes) {
  check(gpuMemsetAsync(device, byte, bytes, nullptr), "memset");
  check(gpuStreamSynchronize(nullptr), "memset");
}

weftStream_t createStream() {
  gpuStream_t stream = nullptr;
  check(gpuStreamCreateWithFlags(&stream, gpuStreamNonBlocking), "creating a stream");
  return stream;
}

void destroyStream(weftStream_t stream) { (void)gpuStreamDestroy(static_cast<gpuStream_t>(stream)); }
void synchronize(weftStream_t stream) { check(gpuStreamSynchronize(static_cast<gpuStream_t>(stream)), "stream synchronize"); }

#else  // selectDevice fails first, so nothing below is reached

namespace {
[[noreturn]] void noRuntime() { throw std::runtime_error("this Weft was built without a GPU runtime"); }
}  // namespace

bool available() { return false; }
bool selectDevice(std::string* error) {
  *error = "--gpu: this Weft was built without a GPU runtime (CUDA or HIP)";
  return false;
}
void* allocate(size_t) { noRuntime(); }
void release(void*) { noRuntime(); }
void toDevice(void*, const void*, size_t) { noRuntime(); }
void toHost(void*, const void*, size_t) { noRuntime(); }
void fill(void*, unsigned char, size_t) { noRuntime(); }
weftStream_t createStream() { noRuntime(); }
void destroyStream(weftStream_t) { noRuntime(); }
void synchronize(weftStream_t) { noRuntime(); }

#endif

}  // namespace weftperf::gpu
