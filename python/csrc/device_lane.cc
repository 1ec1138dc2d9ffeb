// DeviceLane: the CUDA side of a process group (see device_lane.hpp). Built only against a torch
// with CUDA.
#include "device_lane.hpp"

#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
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

// Makes `device` current for a scope, without throwing (destructors use it too).
class DeviceSwitch {
 public:
  explicit DeviceSwitch(c10::DeviceIndex device) {
    if (cudaGetDevice(&previous_) == cudaSuccess && previous_ != device && cudaSetDevice(device) == cudaSuccess) {
      switched_ = true;
    }
  }
  ~DeviceSwitch() {
    if (switched_) cudaSetDevice(previous_);
  }
  DeviceSwitch(const DeviceSwitch&) = delete;
  DeviceSwitch& operator=(const DeviceSwitch&) = delete;

 private:
  int previous_ = -1;
  bool switched_ = false;
};

// An event without timing (the cheapest kind), made and destroyed on its GPU.
struct Event {
  c10::DeviceIndex device;
  cudaEvent_t event = nullptr;

  explicit Event(c10::DeviceIndex d) : device(d) {
    DeviceSwitch onDevice(device);
    checkCuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  }
  ~Event() {
    DeviceSwitch onDevice(device);
    cudaEventDestroy(event);
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  bool passed() const { return cudaEventQuery(event) == cudaSuccess; }
};

}  // namespace

struct StreamMark {
  Event event;
  explicit StreamMark(c10::DeviceIndex device) : event(device) {}
};

struct DeviceLane::Kept {
  struct Held {
    std::unique_ptr<Event> until;  // null: until the lane is destroyed
    std::function<void()> keep;
  };
  std::mutex mutex;
  std::vector<Held> held;
  bool stuck = false;  // an operation timed out: everything behind it on the stream waits too

  void hold(std::unique_ptr<Event> until, std::function<void()> keep) {
    std::lock_guard<std::mutex> lock(mutex);
    releasePassed();
    held.push_back(Held{std::move(until), std::move(keep)});
  }
  // Lets go of what the stream has passed meanwhile; mutex held.
  void releasePassed() {
    std::erase_if(held, [](const Held& h) { return h.until != nullptr && h.until->passed(); });
  }
};

namespace {

// The end of one operation on the lane's stream. Polls rather than blocking in
// cudaEventSynchronize, so that a stream stuck behind other work ends in an error at the
// deadline instead of a hang.
class DeviceEnd final : public Completion {
 public:
  DeviceEnd(std::unique_ptr<Event> event, std::chrono::milliseconds timeout, std::function<void()> keep,
            std::exception_ptr error, std::shared_ptr<DeviceLane::Kept> kept)
      : event_(std::move(event)), timeout_(std::min(timeout, kLongestWait)), keep_(std::move(keep)), error_(error),
        kept_(std::move(kept)) {}

  void await(weftComm_t comm) override {
    if (event_ != nullptr) {
      DeviceSwitch onDevice(event_->device);
      const auto deadline = std::chrono::steady_clock::now() + timeout_;
      for (;;) {
        const cudaError_t rc = cudaEventQuery(event_->event);
        if (rc == cudaSuccess) break;
        bool stuck = false;
        {
          std::lock_guard<std::mutex> lock(kept_->mutex);
          stuck = kept_->stuck || std::chrono::steady_clock::now() > deadline;
          if (rc == cudaErrorNotReady && stuck) kept_->stuck = true;
        }
        if (rc != cudaErrorNotReady || stuck) {
          kept_->hold(std::move(event_), std::move(keep_));  // the GPU may still use these tensors
          if (rc != cudaErrorNotReady) throw cudaFailure(rc, "waiting for a collective on the GPU");
          throw std::runtime_error("weft: a collective on the GPU did not finish within " +
                                   std::to_string(timeout_.count()) + " ms (its stream, or one it waits for, is "
                                   "held up; later CUDA operations of this process group fail at once)");
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
  std::unique_ptr<Event> event_;  // null: nothing to wait for (error_ says why)
  std::chrono::milliseconds timeout_;
  std::function<void()> keep_;  // holds the tensors the operation reads and writes
  std::exception_ptr error_;    // a failure after the operation was issued
  std::shared_ptr<DeviceLane::Kept> kept_;
};

// An event recorded now on `stream`; null where CUDA refuses.
std::unique_ptr<Event> recordOn(c10::DeviceIndex device, cudaStream_t stream, std::exception_ptr* error) {
  try {
    auto event = std::make_unique<Event>(device);
    DeviceSwitch onDevice(device);
    checkCuda(cudaEventRecord(event->event, stream), "cudaEventRecord");
    return event;
  } catch (...) {
    *error = std::current_exception();
    return nullptr;
  }
}

}  // namespace

DeviceLane::DeviceLane(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout, c10::DeviceIndex device)
    : device_(device),
      timeout_(std::min(timeout, kLongestWait)),
      stream_(c10::cuda::getStreamFromPool(false, device)),
      kept_(std::make_shared<Kept>()) {
  c10::cuda::CUDAGuard onDevice(device);  // the communicator binds to the current GPU
  comm_ = initCommThroughStore(store, rank, size, timeout, "weft_unique_id_cuda");
}

DeviceLane::~DeviceLane() {
  DeviceSwitch onDevice(device_);
  std::lock_guard<std::mutex> lock(kept_->mutex);
  kept_->releasePassed();
  if (kept_->held.empty()) {
    weftCommDestroy(comm_);
    return;
  }
  weftCommAbort(comm_);  // what waits on the communicator in the stream is released
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  while (cudaStreamQuery(stream_.stream()) == cudaErrorNotReady && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (cudaStreamQuery(stream_.stream()) == cudaErrorNotReady) {
    // Still busy: the memory stays with the GPU's work until the process ends.
    new std::vector<Kept::Held>(std::move(kept_->held));
    std::fprintf(stderr, "weft: a process group's CUDA stream was still busy when the group was destroyed; the "
                         "tensors of its unfinished operations are kept until the process ends\n");
  }
  kept_->held.clear();
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
  try {
    c10::cuda::CUDAStreamGuard onLane(stream_);
    if (finish) finish();
  } catch (...) {
    error = std::current_exception();
  }
  std::exception_ptr noEvent;
  std::unique_ptr<Event> event = recordOn(device_, stream_.stream(), &noEvent);
  if (event == nullptr) {
    kept_->hold(nullptr, std::move(finish));  // no point in the stream to wait for: kept for the lane's life
    if (!error) error = noEvent;
  }
  return std::make_shared<DeviceEnd>(std::move(event), timeout_, std::move(finish), error, kept_);
}

void DeviceLane::park(std::function<void()> keep) noexcept {
  try {
    std::exception_ptr ignored;
    kept_->hold(recordOn(device_, stream_.stream(), &ignored), std::move(keep));
  } catch (...) {
    // Out of memory while holding on: nothing more can be done safely than not freeing.
    new std::function<void()>(std::move(keep));
  }
}

}  // namespace weft_torch
