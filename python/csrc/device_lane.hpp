// CUDA tensors on the "weft" backend, in a build against a torch with CUDA (WEFT_TORCH_CUDA,
// set by python/setup.py). As in ProcessGroupNCCL, a process group's CUDA operations run on a
// stream of its own, which first waits (an event, on the device) for the stream that was current
// when the operation was called, through a Weft communicator bound to the tensors' GPU; Weft
// returns at once and completes the operation in the stream's order. The Work is done when an
// event recorded after the operation (and the copies back into the caller's tensors) has passed.
// Until then the tensors the operation uses stay referenced, so torch's caching allocator cannot
// hand their memory out under it; the lane holds those of an operation that fails or times out
// until its stream has passed them.
#pragma once

#include <chrono>
#include <functional>
#include <memory>

#include "process_group_weft.hpp"

#ifdef WEFT_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

namespace weft_torch {

// A point in a stream of the lane's GPU (an event recorded there); defined in device_lane.cc.
struct StreamMark;

#ifdef WEFT_TORCH_CUDA

class DeviceLane {
 public:
  // Collective over the group, like its constructor: rank 0 publishes a second unique id in the
  // group's store. The communicator is bound to `device`, the stream made there.
  DeviceLane(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout,
             c10::DeviceIndex device);
  // Where it still holds tensors for the stream: aborts the communicator (so that what waits on it
  // in the stream moves on) and waits for the stream, up to the timeout, before they go; past
  // it they are kept until the process ends.
  ~DeviceLane();
  DeviceLane(const DeviceLane&) = delete;
  DeviceLane& operator=(const DeviceLane&) = delete;

  c10::DeviceIndex device() const { return device_; }
  weftComm_t comm() const { return comm_; }
  c10::cuda::CUDAStream stream() const { return stream_; }

  // Where the calling thread's current stream on the lane's GPU is now.
  std::shared_ptr<StreamMark> markCurrent();
  // The lane's stream waits (on the device) until `mark` has passed.
  void waitFor(const StreamMark& mark);

  // After an operation was issued on the lane's stream: queues `finish` (the copies back into the
  // caller's tensors) there, and returns the operation's completion, which holds `finish` (and the
  // tensors it refers to) until the GPU has passed them. A failure here becomes the completion's
  // error.
  std::shared_ptr<Completion> end(std::function<void()> finish);
  // After an operation failed to issue (Weft may have queued part of it): the lane holds `keep`
  // (and the tensors it refers to) until its stream has passed this point.
  void park(std::function<void()> keep) noexcept;

  struct Kept;  // what the lane holds for operations that failed or timed out

 private:
  c10::DeviceIndex device_;
  std::chrono::milliseconds timeout_;
  weftComm_t comm_ = nullptr;
  c10::cuda::CUDAStream stream_;
  std::shared_ptr<Kept> kept_;
};

#else

// Without CUDA in torch there are no CUDA tensors to run; checkTensor() refuses them.
class DeviceLane {};

#endif

}  // namespace weft_torch
