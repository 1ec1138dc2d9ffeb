// How the ranks of an all-reduce that goes GPU to GPU over CUDA/HIP IPC (device_ipc_allreduce.h)
// keep in step: barriers between their streams on signal counters in IPC memory, which no host
// thread takes part in, and what a rank does when one fails. GPU builds only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "api/device_ipc_allreduce.h"

namespace weft::api {

constexpr size_t kSignalStride = 128;  // a counter per cache line

// Rank `owner`'s counter for signals from rank `from`, as this process addresses it.
uint32_t* signalOf(const DeviceIpc& ipc, int owner, int from);

// Queues a barrier on the device: the stream signals every peer, then waits for every peer's
// signal. Counters only grow, so a peer already past this barrier satisfies it too.
Status queueDeviceBarrier(DeviceIpc& ipc, int rank, int n, gpuStream_t stream);

// Records an operation about to queue barriers, so that a failure skips its kernels too; one
// queued after the path broke is failed at once.
void trackQueued(DeviceIpc& ipc, const std::shared_ptr<DeviceOperation>& op);

// After a failure: fails every operation still queued, this one's and the ones after it, so
// that their kernels skip; marks every peer failed (this rank's stream will still signal them
// once it moves on, and they must not take that for progress); then raises this rank's counters
// past every barrier queued, so that its stream drains. The writes go from a stream of its own,
// in that order.
void releaseBarriers(const std::shared_ptr<CommState>& state);

// Whether an operation may count as done: the device path is not broken, and no peer marked
// this rank failed (read back on the rescue stream, which never waits).
Status checkPeers(const std::shared_ptr<CommState>& state);

// An operation that fails while being queued leaves the ranks out of step (the peers queued
// barriers and took buffers this rank did not), so its next one would pair with their last: the
// path is marked broken, and with barriers on the device the queued ones are released as
// failed, so that neither this rank's stream nor the peers wait forever.
struct BreakUnlessQueued {
  const std::shared_ptr<CommState>& state;
  bool onDevice = false;
  bool queued = false;
  ~BreakUnlessQueued() {
    if (queued) return;
    if (onDevice) releaseBarriers(state);
    state->ipc->broken = true;
  }
};

}  // namespace weft::api
