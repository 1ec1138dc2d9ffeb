#include "gpu/stream_wait.h"

#include <array>
#include <atomic>

#if !defined(WEFT_GPU_HIP)
#include <cuda.h>  // types only: the entry point comes from the runtime, so libweft needs no libcuda at link time

#include "gpu/driver_entry_point.h"
#endif

namespace weft::gpu {

#if defined(WEFT_GPU_HIP)

bool streamMemoryOpsAvailable() {
  // Not every device offers them (hipDeviceAttributeCanUseStreamWaitValue); asked once a device.
  static std::array<std::atomic<int>, 64> known{};  // 0: not asked yet, 1: yes, 2: no
  int device = 0;
  if (hipGetDevice(&device) != hipSuccess) {
    (void)hipGetLastError();
    return false;
  }
  auto* slot = device >= 0 && device < static_cast<int>(known.size()) ? &known[static_cast<size_t>(device)] : nullptr;
  if (slot != nullptr && slot->load() != 0) return slot->load() == 1;
  int can = 0;
  if (hipDeviceGetAttribute(&can, hipDeviceAttributeCanUseStreamWaitValue, device) != hipSuccess) {
    (void)hipGetLastError();
    can = 0;
  }
  if (slot != nullptr) slot->store(can != 0 ? 1 : 2);
  return can != 0;
}

gpuError_t streamWaitAtLeast(gpuStream_t stream, const uint32_t* flag, uint32_t value) {
  return hipStreamWaitValue32(stream, const_cast<uint32_t*>(flag), value, hipStreamWaitValueGte, 0xffffffffu);
}

gpuError_t streamWriteValue(gpuStream_t stream, uint32_t* flag, uint32_t value) {
  return hipStreamWriteValue32(stream, flag, value, 0);
}

bool streamIsCapturing(gpuStream_t stream) {
  hipStreamCaptureStatus status = hipStreamCaptureStatusNone;
  if (hipStreamIsCapturing(stream, &status) != hipSuccess) {
    (void)hipGetLastError();
    return false;
  }
  return status != hipStreamCaptureStatusNone;
}

#else

namespace {

// cuStreamWaitValue32 and cuStreamWriteValue32 have this one signature.
using StreamValue32 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

StreamValue32 waitValue32() {
  static const auto fn = reinterpret_cast<StreamValue32>(driverEntryPoint("cuStreamWaitValue32"));
  return fn;
}

StreamValue32 writeValue32() {
  static const auto fn = reinterpret_cast<StreamValue32>(driverEntryPoint("cuStreamWriteValue32"));
  return fn;
}

}  // namespace

bool streamIsCapturing(gpuStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return status != cudaStreamCaptureStatusNone;
}

bool streamMemoryOpsAvailable() { return waitValue32() != nullptr && writeValue32() != nullptr; }

gpuError_t streamWaitAtLeast(gpuStream_t stream, const uint32_t* flag, uint32_t value) {
  StreamValue32 fn = waitValue32();
  if (fn == nullptr) return cudaErrorNotSupported;
  const CUresult r = fn(stream, reinterpret_cast<CUdeviceptr>(flag), value, CU_STREAM_WAIT_VALUE_GEQ);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorNotSupported;
}

gpuError_t streamWriteValue(gpuStream_t stream, uint32_t* flag, uint32_t value) {
  StreamValue32 fn = writeValue32();
  if (fn == nullptr) return cudaErrorNotSupported;
  const CUresult r = fn(stream, reinterpret_cast<CUdeviceptr>(flag), value, CU_STREAM_WRITE_VALUE_DEFAULT);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorNotSupported;
}

#endif

}  // namespace weft::gpu
