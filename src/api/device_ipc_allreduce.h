// All-reduce of device buffers between the ranks of one host, GPU to GPU over CUDA/HIP IPC.
//
// Each rank owns two IPC buffers (successive pieces alternate, so that no rank refills a buffer
// its peers may still read) and a block of signal counters, and maps every peer's; they are set
// up by the first such all-reduce, collectively, and kept until destroy. A message goes in pieces
// of at most one buffer; per piece, on the caller's stream:
//   1. copy this rank's piece into its buffer;
//   2. a barrier (every rank's copy is done, and so are its reads two pieces back);
//   3. reduce-scatter: one kernel reads block r of every rank's buffer (the peers' directly) and
//      writes the reduced block into its own buffer;
//   4. a barrier (every block is reduced);
//   5. all-gather: copy kernels read each rank's reduced block straight into recvbuff.
// That is the copy-in path. Where every rank sets WEFT_CUDA_IPC_DIRECT_MIN_BYTES (off by
// default), calls of at least that size (the largest any rank set) take the direct path
// instead (device_ipc_direct.h), which reads and writes the users' buffers in place; it falls
// back to copy-in for a call whose buffers some rank cannot share.
// The barriers are on the device: the stream writes the barrier's number into a signal counter of
// every peer and waits until each of its own counters has reached it (stream memory operations),
// so no host thread is in the loop; the progress engine only watches the operation's deadline,
// and on a timeout marks it failed and releases the waits. Without stream memory operations (or
// with WEFT_CUDA_IPC_SYNC=host) the barriers are host phases instead. Kernels read the operation's
// skip flag first, and a failure sets it on every operation queued, so after a failed barrier
// none touches a peer. GPU builds only.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "api/comm_handle.h"
#include "core/collective_call.h"
#include "kernels/gpu/gpu_runtime.h"
#include "transport/cuda_ipc/ipc_buffers.h"
#include "transport/cuda_ipc/ipc_user_buffers.h"
#include "transport/shm/shm_arena.h"

namespace weft::api {

struct DeviceOperation;

struct DeviceIpc {
  ~DeviceIpc();  // with the communicator's device current
  bool usable = false;  // every rank set up and mapped every buffer
  std::unique_ptr<transport::cuda_ipc::IpcBuffers> buffers[2];
  size_t bytes = 0;  // of each buffer, used alike on every rank: the smallest any rank made
  int next = 0;  // the buffer the next piece uses
  // Barriers on the device: rank q's counter for rank r is at signals->of(q) + r * kSignalStride.
  std::unique_ptr<transport::cuda_ipc::IpcBuffers> signals;
  // The device barriers queued so far (the same count on every rank). Rank r's own counter
  // signalOf(r, r) is no barrier's: a peer that failed writes 1 there, so that r fails too
  // rather than take that peer's later signals for progress.
  std::atomic<uint32_t> barriers{0};
  gpuStream_t rescue = nullptr;  // releases this rank's waits after a failure
  uint32_t* markRead = nullptr;  // pinned: where checkPeers reads this rank's failure mark back
  // Set, under queuedMutex, by the first failure; every operation in `queued` (those on a stream
  // and not yet released) is failed with it, so that their kernels skip when the released
  // barriers let them run.
  std::atomic<bool> broken{false};
  std::mutex queuedMutex;
  std::vector<std::weak_ptr<DeviceOperation>> queued;
  // Recorded at the end of each operation; the next one's stream waits for it, so operations on
  // different streams still take the buffers in turn.
  gpuEvent_t done = nullptr;
  bool doneRecorded = false;
  // The direct path: calls of at least directMinBytes (the largest any rank asked for; SIZE_MAX:
  // off, the default), where the ranks swap where their buffers are through a shared-memory arena, once per
  // call, and map each other's (userBuffers).
  size_t directMinBytes = SIZE_MAX;
  std::optional<transport::ShmArena> exchange;
  uint32_t exchangeSeq = 0;
  std::unique_ptr<transport::cuda_ipc::IpcUserBuffers> userBuffers;
};

// Whether `call` goes GPU to GPU: an all-reduce on 2 to 16 ranks, all on this host, issued on
// its own (not in a group: one thread may drive several ranks there), unless WEFT_CUDA_IPC=0 on
// some rank or the set-up failed on one. The first time, this is the (collective, blocking)
// set-up; a failed set-up is not tried again.
Result<bool> ipcAllReduceApplies(CommState& state, const core::CollectiveCall& call);

Status enqueueIpcAllReduce(const std::shared_ptr<CommState>& state, gpuStream_t stream, const char* fn,
                           const core::CollectiveCall& call);

// At destroy, once no device operation is in flight and before the ranks meet: closes this
// rank's mappings of the peers' memory (IPC buffers, signals, users' buffers), since CUDA leaves
// undefined a free of memory that another process still maps.
void closePeerMappings(CommState& state);

// At destroy, once every rank has closed its mappings: frees this rank's buffers.
void releaseDeviceIpc(CommState& state);

}  // namespace weft::api
