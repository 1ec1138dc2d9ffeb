// The one place where CUDA and HIP differ for Weft: the runtime's names. Everything GPU-side is
// written once against the gpu* names below; WEFT_GPU_HIP selects AMD's runtime, otherwise
// NVIDIA's. Host-only files get the runtime API; nvcc / hipcc sources get the full runtime.
#pragma once

#if defined(WEFT_GPU_HIP)
#if !defined(__HIP_PLATFORM_AMD__) && !defined(__HIP_PLATFORM_HCC__)
#define __HIP_PLATFORM_AMD__ 1
#endif
#if defined(__HIPCC__)
#include <hip/hip_runtime.h>
#else
#include <hip/hip_runtime_api.h>
#endif

#define WEFT_GPU_RUNTIME_NAME "HIP"
using gpuError_t = hipError_t;
using gpuStream_t = hipStream_t;
using gpuEvent_t = hipEvent_t;
#define gpuSuccess hipSuccess
#define gpuErrorNotReady hipErrorNotReady
#define gpuErrorInvalidValue hipErrorInvalidValue
#define gpuErrorNoDevice hipErrorNoDevice
#define gpuGetErrorString hipGetErrorString
#define gpuGetLastError hipGetLastError
#define gpuGetDeviceCount hipGetDeviceCount
#define gpuGetDevice hipGetDevice
#define gpuSetDevice hipSetDevice
#define gpuDeviceGetAttribute hipDeviceGetAttribute
#define gpuDeviceGetPCIBusId hipDeviceGetPCIBusId
#define gpuDevAttrMultiProcessorCount hipDeviceAttributeMultiprocessorCount
#define gpuDevAttrMaxThreadsPerBlock hipDeviceAttributeMaxThreadsPerBlock
#define gpuMalloc hipMalloc
#define gpuFree hipFree
#define gpuHostAlloc hipHostMalloc
#define gpuHostAllocMapped hipHostMallocMapped
#define gpuHostAllocPortable hipHostMallocPortable
#define gpuFreeHost hipHostFree
#define gpuHostGetDevicePointer hipHostGetDevicePointer
#define gpuMemcpy hipMemcpy
#define gpuMemcpyAsync hipMemcpyAsync
#define gpuMemsetAsync hipMemsetAsync
#define gpuMemcpyDefault hipMemcpyDefault
#define gpuMemcpyHostToDevice hipMemcpyHostToDevice
#define gpuMemcpyDeviceToHost hipMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define gpuStreamCreateWithFlags hipStreamCreateWithFlags
#define gpuStreamNonBlocking hipStreamNonBlocking
#define gpuStreamDestroy hipStreamDestroy
#define gpuStreamSynchronize hipStreamSynchronize
#define gpuStreamQuery hipStreamQuery
#define gpuStreamWaitEvent hipStreamWaitEvent
#define gpuDeviceSynchronize hipDeviceSynchronize
#define gpuEventCreateWithFlags hipEventCreateWithFlags
#define gpuEventCreate hipEventCreate
#define gpuEventDisableTiming hipEventDisableTiming
#define gpuEventRecord hipEventRecord
#define gpuEventQuery hipEventQuery
#define gpuEventSynchronize hipEventSynchronize
#define gpuEventElapsedTime hipEventElapsedTime
#define gpuEventDestroy hipEventDestroy
#define gpuPointerGetAttributes hipPointerGetAttributes
using gpuPointerAttributes = hipPointerAttribute_t;
using gpuIpcMemHandle_t = hipIpcMemHandle_t;
#define gpuIpcGetMemHandle hipIpcGetMemHandle
#define gpuIpcOpenMemHandle hipIpcOpenMemHandle
#define gpuIpcCloseMemHandle hipIpcCloseMemHandle
#define gpuIpcMemLazyEnablePeerAccess hipIpcMemLazyEnablePeerAccess

#else  // CUDA

#if defined(__CUDACC__)
#include <cuda_runtime.h>
#else
#include <cuda_runtime_api.h>
#endif

#define WEFT_GPU_RUNTIME_NAME "CUDA"
using gpuError_t = cudaError_t;
using gpuStream_t = cudaStream_t;
using gpuEvent_t = cudaEvent_t;
#define gpuSuccess cudaSuccess
#define gpuErrorNotReady cudaErrorNotReady
#define gpuErrorInvalidValue cudaErrorInvalidValue
#define gpuErrorNoDevice cudaErrorNoDevice
#define gpuGetErrorString cudaGetErrorString
#define gpuGetLastError cudaGetLastError
#define gpuGetDeviceCount cudaGetDeviceCount
#define gpuGetDevice cudaGetDevice
#define gpuSetDevice cudaSetDevice
#define gpuDeviceGetAttribute cudaDeviceGetAttribute
#define gpuDeviceGetPCIBusId cudaDeviceGetPCIBusId
#define gpuDevAttrMultiProcessorCount cudaDevAttrMultiProcessorCount
#define gpuDevAttrMaxThreadsPerBlock cudaDevAttrMaxThreadsPerBlock
#define gpuMalloc cudaMalloc
#define gpuFree cudaFree
#define gpuHostAlloc cudaHostAlloc
#define gpuHostAllocMapped cudaHostAllocMapped
#define gpuHostAllocPortable cudaHostAllocPortable
#define gpuFreeHost cudaFreeHost
#define gpuHostGetDevicePointer cudaHostGetDevicePointer
#define gpuMemcpy cudaMemcpy
#define gpuMemcpyAsync cudaMemcpyAsync
#define gpuMemsetAsync cudaMemsetAsync
#define gpuMemcpyDefault cudaMemcpyDefault
#define gpuMemcpyHostToDevice cudaMemcpyHostToDevice
#define gpuMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define gpuStreamCreateWithFlags cudaStreamCreateWithFlags
#define gpuStreamNonBlocking cudaStreamNonBlocking
#define gpuStreamDestroy cudaStreamDestroy
#define gpuStreamSynchronize cudaStreamSynchronize
#define gpuStreamQuery cudaStreamQuery
#define gpuStreamWaitEvent cudaStreamWaitEvent
#define gpuDeviceSynchronize cudaDeviceSynchronize
#define gpuEventCreateWithFlags cudaEventCreateWithFlags
#define gpuEventCreate cudaEventCreate
#define gpuEventDisableTiming cudaEventDisableTiming
#define gpuEventRecord cudaEventRecord
#define gpuEventQuery cudaEventQuery
#define gpuEventSynchronize cudaEventSynchronize
#define gpuEventElapsedTime cudaEventElapsedTime
#define gpuEventDestroy cudaEventDestroy
#define gpuPointerGetAttributes cudaPointerGetAttributes
using gpuPointerAttributes = cudaPointerAttributes;
using gpuIpcMemHandle_t = cudaIpcMemHandle_t;
#define gpuIpcGetMemHandle cudaIpcGetMemHandle
#define gpuIpcOpenMemHandle cudaIpcOpenMemHandle
#define gpuIpcCloseMemHandle cudaIpcCloseMemHandle
#define gpuIpcMemLazyEnablePeerAccess cudaIpcMemLazyEnablePeerAccess

#endif

// Where a pointer's memory lives, as the runtime reports it.
enum class GpuMemoryKind { Host, Device, Managed };

// The runtime's pointer attributes, read the same way on both (HIP 5 reports unregistered host
// memory as an error; CUDA as cudaMemoryTypeUnregistered). The runtime's error, if any, is
// cleared so that it does not surface at the next unrelated call.
inline GpuMemoryKind gpuMemoryKindOf(const void* ptr, int* device) {
  gpuPointerAttributes attributes{};
  if (gpuPointerGetAttributes(&attributes, ptr) != gpuSuccess) {
    (void)gpuGetLastError();
    return GpuMemoryKind::Host;
  }
  *device = attributes.device;
#if defined(WEFT_GPU_HIP)
  if (attributes.isManaged) return GpuMemoryKind::Managed;
#if HIP_VERSION_MAJOR >= 6  // ROCm 6 renamed the field to CUDA's name
  return attributes.type == hipMemoryTypeDevice ? GpuMemoryKind::Device : GpuMemoryKind::Host;
#else
  return attributes.memoryType == hipMemoryTypeDevice ? GpuMemoryKind::Device : GpuMemoryKind::Host;
#endif
#else
  if (attributes.type == cudaMemoryTypeManaged) return GpuMemoryKind::Managed;
  return attributes.type == cudaMemoryTypeDevice ? GpuMemoryKind::Device : GpuMemoryKind::Host;
#endif
}

// Runs fn(arg) on a runtime thread once the stream reaches this point. It may block (Weft's
// waits have deadlines) but must not call the runtime.
using gpuHostCallback = void (*)(void*);
#if defined(WEFT_GPU_HIP)
namespace weft_gpu_detail {
struct HostCallbackThunk {
  gpuHostCallback fn;
  void* arg;
};
inline void runHostCallback(hipStream_t, hipError_t, void* thunk) {
  auto* t = static_cast<HostCallbackThunk*>(thunk);
  t->fn(t->arg);
  delete t;
}
}  // namespace weft_gpu_detail
inline gpuError_t gpuLaunchHostCallback(gpuStream_t stream, gpuHostCallback fn, void* arg) {
  auto* thunk = new weft_gpu_detail::HostCallbackThunk{fn, arg};
  gpuError_t err = hipStreamAddCallback(stream, weft_gpu_detail::runHostCallback, thunk, 0);
  if (err != hipSuccess) delete thunk;
  return err;
}
#else
inline gpuError_t gpuLaunchHostCallback(gpuStream_t stream, gpuHostCallback fn, void* arg) {
  return cudaLaunchHostFunc(stream, fn, arg);
}
#endif
