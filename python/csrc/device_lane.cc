// DeviceLane: the CUDA side of a process group (see device_lane.hpp). Built only against a torch
// with CUDA.
#include "device_lane.hpp"

#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tensor_args.h"

namespace weft_torch {

namespace {

std::runtime_error cudaFailure(cudaError_t rc, const char* what) {
  return std::runtime_error(std::string("weft: ") + what + ": " + cudaGetErrorString(rc));
}

void checkCuda(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) throw cudaFailure(rc, what);
}

// An event without timing (the cheapest kind), made and destroyed on its GPU.
struct Event {
  c10::DeviceIndex device;
  cudaEvent_t event = nullptr;

  explicit Event(c10::DeviceIndex d) : device(d) {
    c10::cuda::CUDAGuard onDevice(device);
    checkCuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  }
  ~Event() {
    c10::cuda::CUDAGuard onDevice(device);
    cudaEventDestroy(event);
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
};

}  // namespace

struct StreamMark {
  Event event;
  explicit StreamMark(c10::DeviceIndex device) : event(device) {}
};

struct DeviceLane::Kept {
  std::mutex mutex;
  std::vector<std::function<void()>> finishes;
};

namespace {

// The end of one operation on the lane's stream. Polls rather than blocking in
// cudaEventSynchronize, so that a stream stuck behind other work ends in an error at the
// deadline instead of a hang.
class DeviceEnd final : public Completion {
 public:
  DeviceEnd(std::unique_ptr<Event> event, std::chrono::milliseconds timeout, std::function<void()> keep,
            std::exception_ptr error, std::shared_ptr<DeviceLane::Kept> kept)
      : event_(std::move(event)), timeout_(timeout), keep_(std::move(keep)), error_(error), kept_(std::move(kept)) {}

  void await(weftComm_t comm) override {
    if (event_ != nullptr) {
      c10::cuda::CUDAGuard onDevice(event_->device);
      const auto deadline = std::chrono::steady_clock::now() + timeout_;
      for (;;) {
        const cudaError_t rc = cudaEventQuery(event_->event);
        if (rc == cudaSuccess) break;
        if (rc != cudaErrorNotReady || std::chrono::steady_clock::now() > deadline) {
          // The GPU may still read and write these tensors: the lane keeps them.
          std::lock_guard<std::mutex> lock(kept_->mutex);
          kept_->finishes.push_back(std::move(keep_));
          if (rc != cudaErrorNotReady) throw cudaFailure(rc, "waiting for a collective on the GPU");
          throw std::runtime_error("weft: a collective on the GPU did not finish within " +
                                   std::to_string(timeout_.count()) + " ms (its stream may be waiting on other work)");
        }
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
    keep_ = nullptr;
    if (error_) std::rethrow_exception(error_);
    // Weft reports what failed on the device side here; the operation's later phases skipped.
    weftResult_t async = weftSuccess;
    check(weftCommGetAsyncError(comm, &async), comm, "weftCommGetAsyncError");
    if (async != weftInProgress) check(async, comm, "collective on the GPU");
  }

 private:
  std::unique_ptr<Event> event_;  // null: the stream was waited for already
  std::chrono::milliseconds timeout_;
  std::function<void()> keep_;  // holds the tensors the operation reads and writes
  std::exception_ptr error_;    // a failure after the operation was issued
  std::shared_ptr<DeviceLane::Kept> kept_;
};

}  // namespace

DeviceLane::DeviceLane(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout, c10::DeviceIndex device)
    : device_(device),
      timeout_(timeout),
      stream_(c10::cuda::getStreamFromPool(false, device)),
      kept_(std::make_shared<Kept>()) {
  c10::cuda::CUDAGuard onDevice(device);  // the communicator binds to the current GPU
  comm_ = initCommThroughStore(store, rank, size, timeout, "weft_unique_id_cuda");
}

DeviceLane::~DeviceLane() {
  c10::cuda::CUDAGuard onDevice(device_);
  std::lock_guard<std::mutex> lock(kept_->mutex);
  if (kept_->finishes.empty()) {
    weftCommDestroy(comm_);
    return;
  }
  weftCommAbort(comm_);  // what waits on the communicator in the stream is released
  cudaStreamSynchronize(stream_.stream());
  kept_->finishes.clear();
}

std::shared_ptr<StreamMark> DeviceLane::markCurrent() {
  auto mark = std::make_shared<StreamMark>(device_);
  c10::cuda::CUDAGuard onDevice(device_);
  checkCuda(cudaEventRecord(mark->event.event, c10::cuda::getCurrentCUDAStream(device_).stream()), "cudaEventRecord");
  return mark;
}

void DeviceLane::waitFor(const StreamMark& mark) {
  c10::cuda::CUDAGuard onDevice(device_);
  checkCuda(cudaStreamWaitEvent(stream_.stream(), mark.event.event, 0), "cudaStreamWaitEvent");
}

std::shared_ptr<Completion> DeviceLane::end(std::function<void()> finish) {
  std::exception_ptr error;
  std::unique_ptr<Event> event;
  try {
    c10::cuda::CUDAStreamGuard onLane(stream_);
    if (finish) finish();
  } catch (...) {
    error = std::current_exception();
  }
  try {
    event = std::make_unique<Event>(device_);
    c10::cuda::CUDAGuard onDevice(device_);
    checkCuda(cudaEventRecord(event->event, stream_.stream()), "cudaEventRecord");
  } catch (...) {
    // No point in the stream to wait for: wait for all of it now, before the tensors can go.
    event.reset();
    c10::cuda::CUDAGuard onDevice(device_);
    cudaStreamSynchronize(stream_.stream());
    if (!error) error = std::current_exception();
  }
  return std::make_shared<DeviceEnd>(std::move(event), timeout_, std::move(finish), error, kept_);
}

}  // namespace weft_torch
