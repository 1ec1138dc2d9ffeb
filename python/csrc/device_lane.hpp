// CUDA tensors on the "weft" backend, in a build against a torch with CUDA (WEFT_TORCH_CUDA,
// set by python/setup.py). As in ProcessGroupNCCL, a process group's CUDA operations run on a
// stream of its own, which first waits (an event, on the device) for the caller's current stream,
// through a Weft communicator bound to the tensors' GPU; Weft returns at once and completes the
// operation in the stream's order. The Work is done when an event recorded after the operation
// (and the copies back into the caller's tensors) has passed; the tensors the operation uses stay
// referenced until then, so torch's caching allocator cannot hand their memory out under it.
#pragma once

#include <chrono>
#include <memory>

#include "process_group_weft.hpp"

#ifdef WEFT_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace weft_torch {

#ifdef WEFT_TORCH_CUDA

class DeviceLane {
 public:
  // Collective over the group, like its constructor: rank 0 publishes a second unique id in the
  // group's store. The communicator is bound to `device`, the stream made there.
  DeviceLane(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout,
             c10::DeviceIndex device);
  ~DeviceLane();
  DeviceLane(const DeviceLane&) = delete;
  DeviceLane& operator=(const DeviceLane&) = delete;

  c10::DeviceIndex device() const { return device_; }
  weftComm_t comm() const { return comm_; }
  c10::cuda::CUDAStream stream() const { return stream_; }

  // The lane's stream waits for what the calling thread's current stream has queued so far.
  void orderAfterCurrent();
  // Records the end of what the lane's stream has queued so far: the operation just issued.
  std::shared_ptr<Completion> recordEnd(std::function<void()> keepAlive);

 private:
  c10::DeviceIndex device_;
  std::chrono::milliseconds timeout_;
  weftComm_t comm_ = nullptr;
  c10::cuda::CUDAStream stream_;
  cudaEvent_t ready_ = nullptr;  // reused: recorded on the caller's stream, waited on by ours
};

#else

// Without CUDA in torch there are no CUDA tensors to run; checkTensor() refuses them.
class DeviceLane {};

#endif

}  // namespace weft_torch
