#include "gpu/staging_pool.h"

#include <chrono>

#include "gpu/device_memory.h"
#include "gpu/staging_sizes.h"
#include "util/log.h"

namespace weft::gpu {

StagingPool::~StagingPool() {
  if (!allBuffers_.empty() || !allEvents_.empty()) {
    WEFT_WARN("device staging: %zu pinned buffers and %zu events left allocated (operations were still in flight)",
              allBuffers_.size(), allEvents_.size());
  }
}

void StagingPool::reclaimPassed() {
  std::erase_if(pending_, [&](Pending& p) {
    if (*p.passed == 0) return false;
    freeBuffers_.push_back(p.buffer);
    freeEvents_.insert(freeEvents_.end(), p.events.begin(), p.events.end());
    return true;
  });
}

Result<PinnedBuffer> StagingPool::acquireBuffer(size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    reclaimPassed();
    // The smallest free buffer that fits, unless it is far larger than needed.
    auto best = freeBuffers_.end();
    for (auto it = freeBuffers_.begin(); it != freeBuffers_.end(); ++it) {
      if (stagingReusable(it->bytes, bytes) && (best == freeBuffers_.end() || it->bytes < best->bytes)) {
        best = it;
      }
    }
    if (best != freeBuffers_.end()) {
      PinnedBuffer found = *best;
      freeBuffers_.erase(best);
      return found;
    }
  }
  PinnedBuffer buffer;
  buffer.bytes = stagingBytesFor(bytes);
  gpuError_t err = gpuHostAlloc(&buffer.host, buffer.bytes, gpuHostAllocMapped | gpuHostAllocPortable);
  if (err != gpuSuccess) {
    (void)gpuGetLastError();
    return runtimeError(err, formatString("allocating %zu bytes of pinned staging memory", buffer.bytes));
  }
  err = gpuHostGetDevicePointer(&buffer.device, buffer.host, 0);
  if (err != gpuSuccess) {
    (void)gpuGetLastError();
    (void)gpuFreeHost(buffer.host);
    return runtimeError(err, "mapping pinned staging memory for the device");
  }
  err = gpuMalloc(&buffer.deviceWords, PinnedBuffer::kDeviceWordsBytes);
  if (err != gpuSuccess) {
    (void)gpuGetLastError();
    (void)gpuFreeHost(buffer.host);
    return runtimeError(err, "allocating device memory for the staging's flags");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  allBuffers_.push_back(buffer);
  return buffer;
}

Result<gpuEvent_t> StagingPool::acquireEvent() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (freeEvents_.empty()) reclaimPassed();
    if (!freeEvents_.empty()) {
      gpuEvent_t event = freeEvents_.back();
      freeEvents_.pop_back();
      return event;
    }
  }
  gpuEvent_t event = nullptr;
  gpuError_t err = gpuEventCreateWithFlags(&event, gpuEventDisableTiming);
  if (err != gpuSuccess) {
    (void)gpuGetLastError();
    return runtimeError(err, "creating an event");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  allEvents_.push_back(event);
  return event;
}

void StagingPool::release(const PinnedBuffer& buffer) {
  std::lock_guard<std::mutex> lock(mutex_);
  freeBuffers_.push_back(buffer);
}

void StagingPool::release(gpuEvent_t event) {
  std::lock_guard<std::mutex> lock(mutex_);
  freeEvents_.push_back(event);
}

void StagingPool::releaseWhenPassed(const PinnedBuffer& buffer, std::vector<gpuEvent_t> events,
                                    const volatile uint32_t* passed) {
  std::lock_guard<std::mutex> lock(mutex_);
  pending_.push_back({buffer, std::move(events), passed});
}

void StagingPool::operationStarted() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++inFlight_;
}

void StagingPool::operationEnded() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (--inFlight_ == 0) ended_.notify_all();
}

bool StagingPool::waitIdle(int timeoutMs) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
  std::unique_lock<std::mutex> lock(mutex_);
  reclaimPassed();
  while (inFlight_ > 0 || !pending_.empty()) {
    if (std::chrono::steady_clock::now() >= deadline) {
      WEFT_WARN("device staging: %d operations still in flight and %zu not yet passed by their streams after %d ms; "
                "their memory is not freed",
                inFlight_, pending_.size(), timeoutMs);
      return false;
    }
    // Nothing signals a stream's write: while only those are left, look again soon.
    ended_.wait_for(lock, std::chrono::milliseconds(inFlight_ > 0 ? 100 : 1));
    reclaimPassed();
    // After a device fault the runtime skips host functions, so no operation would ever end.
    const gpuError_t health = gpuStreamQuery(nullptr);
    if (health != gpuSuccess && health != gpuErrorNotReady) {
      (void)gpuGetLastError();
      WEFT_WARN("device staging: the GPU failed (%s); %d operations never ended (%zu never passed), their memory is "
                "not freed",
                gpuGetErrorString(health), inFlight_, pending_.size());
      return false;
    }
  }
  return true;
}

void StagingPool::freeAll() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const PinnedBuffer& buffer : allBuffers_) {
    (void)gpuFreeHost(buffer.host);
    (void)gpuFree(buffer.deviceWords);
  }
  for (gpuEvent_t event : allEvents_) (void)gpuEventDestroy(event);
  (void)gpuGetLastError();
  allBuffers_.clear();
  freeBuffers_.clear();
  allEvents_.clear();
  freeEvents_.clear();
  pending_.clear();
}

}  // namespace weft::gpu
