// A communicator's pinned host memory and runtime events for collectives on device buffers.
// Buffers are mapped (a kernel can read and write them over the bus) and reused; operations in
// flight are counted, so that destroy frees nothing the GPU may still touch.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "kernels/gpu/gpu_runtime.h"
#include "util/status.h"

namespace weft::gpu {

struct PinnedBuffer {
  void* host = nullptr;    // what the CPU (and the transports) use
  void* device = nullptr;  // the same memory as a kernel addresses it
  size_t bytes = 0;
  // kDeviceWordsBytes of device memory beside it, for what every block of a kernel reads: a read
  // of mapped host memory crosses the bus, and a thousand blocks reading one word took about a
  // millisecond on an H100.
  void* deviceWords = nullptr;
  static constexpr size_t kDeviceWordsBytes = 256;
};

class StagingPool {
 public:
  explicit StagingPool(int device) : device_(device) {}
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;
  ~StagingPool();  // frees nothing: see waitIdle and freeAll

  int device() const { return device_; }

  // A buffer of at least `bytes`, reused when one is free. Call with the pool's device current.
  Result<PinnedBuffer> acquireBuffer(size_t bytes);
  Result<gpuEvent_t> acquireEvent();
  // Give back; neither calls the runtime, so stream callbacks may return things.
  void release(const PinnedBuffer& buffer);
  void release(gpuEvent_t event);
  // Gives back what an operation used once `passed` (a word of the buffer's own pinned memory,
  // which a stream memory operation queued after the operation's work writes) is non-zero: until
  // then none of it is handed out again, and waitIdle waits for it.
  void releaseWhenPassed(const PinnedBuffer& buffer, std::vector<gpuEvent_t> events, const volatile uint32_t* passed);

  // One more, or one fewer, operation in flight.
  void operationStarted();
  void operationEnded();

  // Waits up to timeoutMs for every operation to end and its stream to pass it; false when some
  // are still in flight (or the device has failed, so that its stream callbacks will never run).
  bool waitIdle(int timeoutMs);
  // Frees every buffer and event; only after waitIdle returned true.
  void freeAll();

 private:
  struct Pending {
    PinnedBuffer buffer;
    std::vector<gpuEvent_t> events;
    const volatile uint32_t* passed;
  };
  // Moves what the streams have passed from pending_ to the free lists; with mutex_ held.
  void reclaimPassed();

  const int device_;
  std::mutex mutex_;
  std::vector<Pending> pending_;
  std::condition_variable ended_;
  int inFlight_ = 0;
  std::vector<PinnedBuffer> freeBuffers_;
  std::vector<PinnedBuffer> allBuffers_;
  std::vector<gpuEvent_t> freeEvents_;
  std::vector<gpuEvent_t> allEvents_;
};

}  // namespace weft::gpu
