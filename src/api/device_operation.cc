#include "api/device_operation.h"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <thread>

#include "api/host_stream.h"
#include "gpu/device_memory.h"
#include "gpu/stream_wait.h"
#include "util/log.h"

namespace weft::api {

ScopedDevice::ScopedDevice(int device) {
  if (gpuGetDevice(&previous_) != gpuSuccess) previous_ = -1;
  if (previous_ != device) (void)gpuSetDevice(device);
}

ScopedDevice::~ScopedDevice() {
  if (previous_ >= 0) (void)gpuSetDevice(previous_);
}

Status checkRuntime(gpuError_t err, const char* what) {
  if (err == gpuSuccess) return Status::ok();
  (void)gpuGetLastError();
  return gpu::runtimeError(err, what);
}

DeviceOperation::DeviceOperation(std::shared_ptr<CommState> s, std::shared_ptr<gpu::StagingPool> p, const char* f)
    : state(std::move(s)), pool(std::move(p)), fn(f) {
  pool->operationStarted();
}

DeviceOperation::~DeviceOperation() {
  // Staging memory is reused only when the stream is known to be done with it: the release
  // callback ran. An operation abandoned halfway (a runtime error while queueing) keeps it.
  if (released) {
    if (pinned.host != nullptr) pool->release(pinned);
    for (gpuEvent_t event : events) pool->release(event);
  } else if (releaseWritten) {
    pool->releaseWhenPassed(pinned, std::move(events),
                            reinterpret_cast<const volatile uint32_t*>(static_cast<unsigned char*>(pinned.host) +
                                                                       kPassedFlagAt));
  }
  pool->operationEnded();
}

Status DeviceOperation::allocate(size_t bytes) {
  WEFT_ASSIGN_OR_RETURN(pinned, pool->acquireBuffer(kControlBytes + bytes));
  std::memset(pinned.host, 0, kControlBytes);
  return Status::ok();
}

Status DeviceOperation::copySkipFlag(gpuStream_t stream) {
  return checkRuntime(gpuMemcpyAsync(pinned.deviceWords, pinned.host, sizeof(int), gpuMemcpyHostToDevice, stream),
                      "copying the operation's skip flag to the device");
}

void DeviceOperation::finishPhase(uint32_t phase) {
  // Whatever the phase wrote to staging (and the skip flag) is visible before the flag moves.
  std::atomic_thread_fence(std::memory_order_release);
  *reinterpret_cast<volatile uint32_t*>(static_cast<unsigned char*>(pinned.host) + kPhaseFlagAt) = phase;
}

bool DeviceOperation::skip(const Status& status) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!failure.isOk()) return false;
    failure = status;
  }
  // Kernels queued after this point read the flag and return at once.
  if (pinned.host != nullptr) reinterpret_cast<volatile int*>(pinned.host)[0] = 1;
  int expected = weftSuccess;
  state->backgroundError.compare_exchange_strong(expected, status.code());
  return true;
}

void DeviceOperation::fail(const Status& status) {
  if (skip(status)) reportError(status, state.get());
}

Status DeviceOperation::failed() {
  std::lock_guard<std::mutex> lock(mutex);
  return failure;
}

std::shared_ptr<gpu::StagingPool> stagingPoolOf(CommState& state) {
  std::lock_guard<std::mutex> lock(state.stagingMutex);
  if (!state.staging) state.staging = std::make_shared<gpu::StagingPool>(state.device);
  return state.staging;
}

namespace {

// The end of a host phase, which the stream's callback waits for.
class PhaseLatch {
 public:
  void set() {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
    changed_.notify_all();
  }
  bool wait(int timeoutMs) {
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_for(lock, std::chrono::milliseconds(timeoutMs), [&] { return done_; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool done_ = false;
};

struct PhaseWait {
  OperationRef op;
  std::shared_ptr<PhaseLatch> latch;
};

// Stream callback, where the driver cannot wait on a flag: holds the stream until the host phase
// ends (it always does, by its own deadlines; the backstop only guards against a lost engine).
// Host functions may share one runtime thread, so this can delay other streams' callbacks.
void waitForPhase(void* arg) {
  std::unique_ptr<PhaseWait> wait(static_cast<PhaseWait*>(arg));
  const int backstopMs = streamBackstopMs(wait->op->state->config.timeoutMs);
  if (!wait->latch->wait(backstopMs)) {
    wait->op->fail(Status(weftTimeout, formatString("%s: the host side of the operation did not finish within %d ms",
                                                    wait->op->fn, backstopMs)));
  }
}

// Stream callback, the operation's last step on the stream.
void releaseOperation(void* arg) {
  std::unique_ptr<OperationRef> op(static_cast<OperationRef*>(arg));
  (*op)->released = true;
}


}  // namespace

Status waitForEvent(gpuEvent_t event, const Deadline& deadline, const std::atomic<bool>& abortFlag, int timeoutMs) {
  for (int polls = 0;; ++polls) {
    gpuError_t err = gpuEventQuery(event);
    if (err == gpuSuccess) return Status::ok();
    if (err != gpuErrorNotReady) return checkRuntime(err, "waiting for the stream to reach the operation");
    if (abortFlag.load()) return Status(weftRemoteError, "the communicator was aborted");
    if (deadline.expired()) {
      return Status(weftTimeout, formatString("the stream did not reach this operation within %d ms (is earlier work "
                                              "on the stream waiting for it?)",
                                              timeoutMs));
    }
    if (polls < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

Status enqueueHostPhase(const OperationRef& op, gpuStream_t stream, std::function<Status(core::Communicator&)> work) {
  WEFT_ASSIGN_OR_RETURN(gpuEvent_t event, op->pool->acquireEvent());
  op->events.push_back(event);
  WEFT_TRY(checkRuntime(gpuEventRecord(event, stream), "recording an event on the stream"));
  const uint32_t phase = ++op->phasesQueued;
  auto latch = std::make_shared<PhaseLatch>();
  Status queued = op->state->engine.enqueue([op, event, latch, phase, work = std::move(work)]() {
    ScopedDevice onDevice(op->pool->device());
    const int timeoutMs = op->state->config.timeoutMs;
    Status status = op->failed();
    if (status.isOk()) status = waitForEvent(event, Deadline::afterMs(timeoutMs), op->state->abortFlag, timeoutMs);
    if (status.isOk()) {
      core::Communicator* c = op->state->communicator.get();
      status = c == nullptr ? Status(weftInvalidUsage, "the communicator was destroyed") : work(*c);
      if (c != nullptr) status = status.withContext(formatString("%s (rank %d of %d)", op->fn, c->rank(), c->size()));
    }
    if (!status.isOk()) op->fail(status);
    op->finishPhase(phase);
    latch->set();
    return status;
  });
  WEFT_TRY(queued);
  if (gpu::streamWaitAtLeast(stream, op->devicePhaseFlag(), phase) == gpuSuccess) return Status::ok();
  (void)gpuGetLastError();
  static std::once_flag logged;
  std::call_once(logged, [] { WEFT_INFO("no stream memory operations: host phases block a stream callback instead"); });
  auto* wait = new PhaseWait{op, latch};
  if (gpuError_t err = gpuLaunchHostCallback(stream, waitForPhase, wait); err != gpuSuccess) {
    delete wait;
    return checkRuntime(err, "queueing a host callback on the stream");
  }
  return Status::ok();
}

Status enqueueWatch(const OperationRef& op, gpuStream_t stream, gpuEvent_t started, std::function<Status()> check,
                    std::function<void()> unblock) {
  WEFT_ASSIGN_OR_RETURN(gpuEvent_t ended, op->pool->acquireEvent());
  op->events.push_back(ended);
  WEFT_TRY(checkRuntime(gpuEventRecord(ended, stream), "recording an event on the stream"));
  return op->state->engine.enqueue([op, started, ended, check = std::move(check), unblock = std::move(unblock)]() {
    ScopedDevice onDevice(op->pool->device());
    const int timeoutMs = op->state->config.timeoutMs;
    Status status = op->failed();
    if (!status.isOk()) {
      // Failed while queued, behind a failed operation whose release let it through. A live
      // peer whose stream drains later still writes the barrier numbers it had queued, which
      // can lower a counter the release raised: release again if the stream does not pass.
      if (!waitForEvent(ended, Deadline::afterMs(timeoutMs), op->state->abortFlag, timeoutMs).isOk()) unblock();
      return status;
    }
    status = waitForEvent(started, Deadline::afterMs(timeoutMs), op->state->abortFlag, timeoutMs);
    if (status.isOk()) {
      status = waitForEvent(ended, Deadline::afterMs(timeoutMs), op->state->abortFlag, timeoutMs);
      if (status.code() == weftTimeout) {
        status = Status(weftTimeout, formatString("%s: the peers did not all reach this operation within %d ms (a "
                                                  "rank died, or called another collective)",
                                                  op->fn, timeoutMs));
      }
    }
    if (status.isOk()) status = check();
    if (!status.isOk()) {
      op->fail(status);
      unblock();
    }
    return status;
  });
}

Status enqueueRelease(const OperationRef& op, gpuStream_t stream) {
  if (op->pinned.host != nullptr && gpu::streamMemoryOpsAvailable()) {
    auto* passed = reinterpret_cast<uint32_t*>(static_cast<unsigned char*>(op->pinned.device) +
                                               DeviceOperation::kPassedFlagAt);
    if (gpu::streamWriteValue(stream, passed, 1) == gpuSuccess) {
      op->releaseWritten = true;
      return Status::ok();
    }
    (void)gpuGetLastError();
  }
  auto* ref = new OperationRef(op);
  if (gpuError_t err = gpuLaunchHostCallback(stream, releaseOperation, ref); err != gpuSuccess) {
    delete ref;
    return checkRuntime(err, "queueing the release callback");
  }
  return Status::ok();
}

}  // namespace weft::api
