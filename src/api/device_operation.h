// One collective on device buffers in flight, and the steps every device path queues on the
// caller's stream: host phases (the progress engine runs host-side work once an event says the
// stream got there, while the stream waits on the device for the phase's flag in pinned memory),
// the release of the operation's pinned memory, and runtime error checks. GPU builds only.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "api/comm_handle.h"
#include "gpu/staging_pool.h"
#include "kernels/gpu/gpu_runtime.h"
#include "util/deadline.h"

namespace weft::api {

// Makes a device current for a scope, restoring the caller's.
class ScopedDevice {
 public:
  explicit ScopedDevice(int device);
  ~ScopedDevice();
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

 private:
  int previous_ = -1;
};

// What a device operation's stream callbacks and engine jobs share. The last of them to let go
// returns the staging memory; nothing here calls the runtime, so that may be a stream callback.
struct DeviceOperation {
  DeviceOperation(std::shared_ptr<CommState> s, std::shared_ptr<gpu::StagingPool> p, const char* f);
  ~DeviceOperation();
  DeviceOperation(const DeviceOperation&) = delete;
  DeviceOperation& operator=(const DeviceOperation&) = delete;

  // Pinned memory for the operation: `bytes` of staging after a small control block: an int the
  // kernels read as "skip" (set once the operation failed, so that no later kernel touches a
  // peer's memory) and the count of host phases finished, which the stream waits on.
  Status allocate(size_t bytes);
  unsigned char* hostStaging() const { return static_cast<unsigned char*>(pinned.host) + kControlBytes; }
  unsigned char* deviceStaging() const { return static_cast<unsigned char*>(pinned.device) + kControlBytes; }
  // The skip flag as kernels read it: a copy in device memory, which copySkipFlag refreshes in
  // stream order (call it after each wait, before the kernels that follow).
  const int* deviceSkipFlag() const { return static_cast<const int*>(pinned.deviceWords); }
  Status copySkipFlag(gpuStream_t stream);
  // The skip flag where the host writes it, for a kernel to read over the bus: cheaper than the
  // copy for a grid of a few blocks (kMappedSkipMaxBytes), each of which reads it once.
  const int* mappedSkipFlag() const { return static_cast<const int*>(pinned.device); }
  static constexpr size_t kMappedSkipMaxBytes = 64 << 10;
  // Device memory for a PreMulSum scalar (up to 16 bytes), beside the skip flag.
  void* deviceScalar() const { return static_cast<unsigned char*>(pinned.deviceWords) + 16; }
  const uint32_t* devicePhaseFlag() const {
    return reinterpret_cast<const uint32_t*>(static_cast<unsigned char*>(pinned.device) + kPhaseFlagAt);
  }
  // Lets the stream past host phase `phase` (1, 2, ...); phases finish in order.
  void finishPhase(uint32_t phase);

  // A failure is what weftCommGetAsyncError reports; later phases and kernels do not run.
  void fail(const Status& status);
  // The same without the last-error text, for an operation skipped because an earlier one
  // failed: the text stays the earlier failure's, which says what went wrong (as does
  // weftCommGetAsyncError, which keeps the first code). False where it had failed already.
  bool skip(const Status& status);
  Status failed();

  // Whether the stream has passed the operation's last step (enqueueRelease).
  bool streamPassed() const {
    return released || (releaseWritten && *reinterpret_cast<const volatile uint32_t*>(
                                               static_cast<const unsigned char*>(pinned.host) + kPassedFlagAt) != 0);
  }

  static constexpr size_t kControlBytes = 256;
  static constexpr size_t kPhaseFlagAt = 64;    // its own cache line, apart from the skip flag
  static constexpr size_t kPassedFlagAt = 128;  // written by the stream after the operation's work
  uint32_t phasesQueued = 0;  // the API thread's count
  std::shared_ptr<CommState> state;
  std::shared_ptr<gpu::StagingPool> pool;
  const char* fn;
  gpu::PinnedBuffer pinned;
  std::vector<gpuEvent_t> events;
  std::atomic<bool> released{false};  // set by the release callback, the stream's last step
  std::atomic<bool> releaseWritten{false};  // or the stream writes the passed flag instead (enqueueRelease)
  std::mutex mutex;
  Status failure;
};

using OperationRef = std::shared_ptr<DeviceOperation>;

// The communicator's pinned staging pool, made on first use.
std::shared_ptr<gpu::StagingPool> stagingPoolOf(CommState& state);

// Queues a host phase: an event after the stream's work so far, the engine job that waits for it
// and runs `work` on the communicator, and the stream's wait for the job (a device-side wait on
// the phase flag; a blocking stream callback where the driver has no stream memory operations).
Status enqueueHostPhase(const OperationRef& op, gpuStream_t stream, std::function<Status(core::Communicator&)> work);

// Watches device work that waits on peers by itself (stream memory operations): the engine waits
// for the stream to pass `started` (recorded before that work) and then the end of what is queued
// now, each within the timeout, then asks `check` whether it may count as done. If either does
// not come (or the communicator is aborted, or check fails), the operation fails, so that its
// kernels skip, and `unblock` releases the stream's waits.
Status enqueueWatch(const OperationRef& op, gpuStream_t stream, gpuEvent_t started, std::function<Status()> check,
                    std::function<void()> unblock);

// Waits for a stream to reach `event`, polling until the deadline or an abort.
Status waitForEvent(gpuEvent_t event, const Deadline& deadline, const std::atomic<bool>& abortFlag, int timeoutMs);

// The operation's last step on the stream: its pinned memory and events go back to the pool once
// the stream passes it. Where the driver has stream memory operations the stream writes a flag in
// that memory, which the pool reads; elsewhere a host callback, which holds the stream until a
// driver thread has run it, marks it released.
Status enqueueRelease(const OperationRef& op, gpuStream_t stream);

// weftUnhandledCudaError with the runtime's text when err is not success (the runtime's sticky
// last error is cleared).
Status checkRuntime(gpuError_t err, const char* what);

}  // namespace weft::api
