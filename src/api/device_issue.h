// Collectives on device buffers, in the order of the caller's GPU stream.
//
// The calls return at once. On the stream, Weft queues: copies of the send buffers into pinned
// host staging; a host phase, which the communicator's progress engine runs once an event says
// the copies are done (the existing transports move the staged bytes); a stream callback that
// holds the stream until that phase ends (a wait with a deadline on a host thread: no kernel ever
// spins on another process); then, for reductions, the GPU kernel; and copies of the results
// back. Reductions exchange blocks with an all-to-all, sum each rank's block on the GPU, and, for
// all-reduce and reduce, gather the reduced blocks in a second host phase.
#pragma once

#include <vector>

#include "api/buffer_use.h"
#include "api/comm_handle.h"
#include "core/collective_call.h"

namespace weft::api {

// Issues `calls` (one call, or one communicator's share of a group; their buffers already
// checked and on the communicator's device) on `stream`, a cudaStream_t / hipStream_t.
weftResult_t issueOnDevice(std::shared_ptr<CommState> state, void* stream, const char* fn,
                           std::vector<core::CollectiveCall> calls, bool grouped);

// Whether a call's buffers (`use`: as checkBuffers found them) are device memory on state's
// device. An error when they are on another device, or mixed.
Result<bool> callIsOnDevice(const char* fn, const CommState& state, const core::CollectiveCall& call,
                            const BufferUse& use);

// At destroy (not abort), before the engine stops: waits for device operations still on their
// streams and, where CUDA IPC is in use, meets every peer so that none still reads this rank's
// buffers.
void quiesceDevice(CommState& state);

// At destroy, after the engine stopped: frees the pinned staging memory and the CUDA IPC
// buffers, or, if operations never ended, deliberately keeps them.
void releaseDeviceStaging(CommState& state);

}  // namespace weft::api
