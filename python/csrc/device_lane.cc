// DeviceLane: the CUDA side of a process group (see device_lane.hpp). Built only against a torch
// with CUDA.
#include "device_lane.hpp"

#include <c10/cuda/CUDAGuard.h>

#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>

#include "tensor_args.h"

namespace weft_torch {

namespace {

void checkCuda(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) throw std::runtime_error(std::string("weft: ") + what + ": " + cudaGetErrorString(rc));
}

cudaEvent_t makeEvent() {
  cudaEvent_t event = nullptr;
  checkCuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  return event;
}

// The end of one operation on the lane's stream. Polls rather than blocking in
// cudaEventSynchronize, so that a stream stuck behind other work ends in an error at the
// deadline instead of a hang.
class DeviceEnd final : public Completion {
 public:
  DeviceEnd(cudaEvent_t event, std::chrono::milliseconds timeout, std::function<void()> keepAlive)
      : event_(event), timeout_(timeout), keepAlive_(std::move(keepAlive)) {}
  ~DeviceEnd() override { cudaEventDestroy(event_); }

  void await(weftComm_t comm) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    for (;;) {
      const cudaError_t rc = cudaEventQuery(event_);
      if (rc == cudaSuccess) break;
      if (rc != cudaErrorNotReady) checkCuda(rc, "waiting for a collective on the GPU");
      if (std::chrono::steady_clock::now() > deadline) {
        throw std::runtime_error("weft: a collective on the GPU did not finish within " +
                                 std::to_string(timeout_.count()) + " ms (its stream may be waiting on other work)");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    keepAlive_ = nullptr;
    // Weft reports what failed on the device side here; the operation's later phases skipped.
    weftResult_t async = weftSuccess;
    check(weftCommGetAsyncError(comm, &async), comm, "weftCommGetAsyncError");
    if (async != weftInProgress) check(async, comm, "collective on the GPU");
  }

 private:
  cudaEvent_t event_;
  std::chrono::milliseconds timeout_;
  std::function<void()> keepAlive_;  // the tensors the operation reads and writes
};

}  // namespace

DeviceLane::DeviceLane(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout, c10::DeviceIndex device)
    : device_(device), timeout_(timeout), stream_(c10::cuda::getStreamFromPool(false, device)) {
  c10::cuda::CUDAGuard onDevice(device);  // the communicator binds to the current GPU
  const std::string key = "weft_unique_id_cuda";
  weftUniqueId id;
  if (rank == 0) {
    check(weftGetUniqueId(&id), nullptr, "weftGetUniqueId");
    const auto* bytes = reinterpret_cast<const uint8_t*>(&id);
    store->set(key, std::vector<uint8_t>(bytes, bytes + sizeof(id)));
  } else {
    std::vector<uint8_t> bytes = store->get(key);
    TORCH_CHECK(bytes.size() == sizeof(id), "weft: the store holds a malformed unique id");
    std::memcpy(&id, bytes.data(), sizeof(id));
  }
  weftConfig_t config = WEFT_CONFIG_INITIALIZER;
  config.timeoutMs = static_cast<int>(std::clamp<int64_t>(timeout.count(), 1, std::numeric_limits<int>::max()));
  check(weftCommInitRankConfig(&comm_, size, id, rank, &config), nullptr, "weftCommInitRankConfig (CUDA tensors)");
  ready_ = makeEvent();
}

DeviceLane::~DeviceLane() {
  if (ready_ != nullptr) cudaEventDestroy(ready_);
  if (comm_ != nullptr) weftCommDestroy(comm_);
}

void DeviceLane::orderAfterCurrent() {
  c10::cuda::CUDAGuard onDevice(device_);
  checkCuda(cudaEventRecord(ready_, c10::cuda::getCurrentCUDAStream(device_).stream()), "cudaEventRecord");
  checkCuda(cudaStreamWaitEvent(stream_.stream(), ready_, 0), "cudaStreamWaitEvent");
}

std::shared_ptr<Completion> DeviceLane::recordEnd(std::function<void()> keepAlive) {
  c10::cuda::CUDAGuard onDevice(device_);
  cudaEvent_t end = makeEvent();
  if (cudaError_t rc = cudaEventRecord(end, stream_.stream()); rc != cudaSuccess) {
    cudaEventDestroy(end);
    checkCuda(rc, "cudaEventRecord");
  }
  return std::make_shared<DeviceEnd>(end, timeout_, std::move(keepAlive));
}

}  // namespace weft_torch
