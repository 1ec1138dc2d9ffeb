#include "api/device_ipc_sync.h"

#include "api/device_operation.h"
#include "gpu/stream_wait.h"
#include "util/log.h"

namespace weft::api {

uint32_t* signalOf(const DeviceIpc& ipc, int owner, int from) {
  return reinterpret_cast<uint32_t*>(ipc.signals->of(owner) + static_cast<size_t>(from) * kSignalStride);
}

Status queueDeviceBarrier(DeviceIpc& ipc, int rank, int n, gpuStream_t stream) {
  const uint32_t number = ++ipc.barriers;
  for (int q = 0; q < n; ++q) {
    if (q == rank) continue;
    WEFT_TRY(checkRuntime(gpu::streamWriteValue(stream, signalOf(ipc, q, rank), number), "signalling a peer"));
  }
  for (int q = 0; q < n; ++q) {
    if (q == rank) continue;
    WEFT_TRY(checkRuntime(gpu::streamWaitAtLeast(stream, signalOf(ipc, rank, q), number), "waiting for a peer"));
  }
  return Status::ok();
}

namespace {

Status skippedAfterFailure() {
  return Status(weftRemoteError, "skipped: an earlier all-reduce on device buffers failed");
}

}  // namespace

void trackQueued(DeviceIpc& ipc, const std::shared_ptr<DeviceOperation>& op) {
  std::lock_guard<std::mutex> lock(ipc.queuedMutex);
  std::erase_if(ipc.queued, [](const std::weak_ptr<DeviceOperation>& q) {
    auto live = q.lock();
    return live == nullptr || live->streamPassed();
  });
  if (ipc.broken) {
    op->skip(skippedAfterFailure());
    return;
  }
  ipc.queued.push_back(op);
}

void releaseBarriers(const std::shared_ptr<CommState>& state) {
  DeviceIpc& ipc = *state->ipc;
  // Held to the end: the engine thread and a user thread's failed call may release at once, and
  // the number each reads must reach the rescue stream in the order read, never a lower one last.
  std::lock_guard<std::mutex> lock(ipc.queuedMutex);
  // Before the counters move: a kernel reads its operation's skip flag once its barrier passes.
  ipc.broken = true;
  for (const auto& q : ipc.queued) {
    if (auto live = q.lock(); live != nullptr && !live->streamPassed()) live->skip(skippedAfterFailure());
  }
  ipc.queued.clear();
  auto write = [&](uint32_t* counter, uint32_t value, const char* what, int q) {
    if (gpu::streamWriteValue(ipc.rescue, counter, value) == gpuSuccess) return;
    (void)gpuGetLastError();
    WEFT_WARN("after a failed all-reduce, cannot %s rank %d", what, q);
  };
  for (int q = 0; q < state->nranks; ++q) {
    if (q != state->rank) write(signalOf(ipc, q, q), 1, "mark failed", q);
  }
  const uint32_t number = ipc.barriers.load();
  for (int q = 0; q < state->nranks; ++q) {
    if (q != state->rank) write(signalOf(ipc, state->rank, q), number, "release the wait for", q);
  }
}

Status checkPeers(const std::shared_ptr<CommState>& state) {
  DeviceIpc& ipc = *state->ipc;
  if (ipc.broken) return Status(weftRemoteError, "an earlier all-reduce on device buffers failed");
  // Into pinned memory: a copy to pageable memory would go through a bounce buffer, on every call.
  if (gpuMemcpyAsync(ipc.markRead, signalOf(ipc, state->rank, state->rank), sizeof *ipc.markRead,
                     gpuMemcpyDeviceToHost, ipc.rescue) != gpuSuccess ||
      gpuStreamSynchronize(ipc.rescue) != gpuSuccess) {
    (void)gpuGetLastError();
    return Status::ok();  // unreadable: the deadline still guards the operation
  }
  if (*ipc.markRead != 0) return Status(weftRemoteError, "a peer's all-reduce failed (timed out or aborted); the result is not valid");
  return Status::ok();
}

}  // namespace weft::api
