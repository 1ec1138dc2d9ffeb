#include "gpu/stream_wait.h"

#if !defined(WEFT_GPU_HIP)
#include <cuda.h>  // types only: the entry point comes from the runtime, so libweft needs no libcuda at link time
#endif

namespace weft::gpu {

#if defined(WEFT_GPU_HIP)

gpuError_t streamWaitAtLeast(gpuStream_t stream, const uint32_t* flag, uint32_t value) {
  return hipStreamWaitValue32(stream, const_cast<uint32_t*>(flag), value, hipStreamWaitValueGte, 0xffffffffu);
}

bool streamIsCapturing(gpuStream_t) { return false; }

#else

namespace {

using WaitValue32 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

WaitValue32 waitValue32() {
  static const WaitValue32 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &p, 12000, cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      p = nullptr;
    }
    return reinterpret_cast<WaitValue32>(p);
  }();
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

gpuError_t streamWaitAtLeast(gpuStream_t stream, const uint32_t* flag, uint32_t value) {
  WaitValue32 fn = waitValue32();
  if (fn == nullptr) return cudaErrorNotSupported;
  const CUresult r = fn(stream, reinterpret_cast<CUdeviceptr>(flag), value, CU_STREAM_WAIT_VALUE_GEQ);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorNotSupported;
}

#endif

}  // namespace weft::gpu
