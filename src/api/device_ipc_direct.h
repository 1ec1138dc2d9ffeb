// The direct all-reduce over CUDA/HIP IPC: no staging buffers. Rank r's kernel reads block r of
// every rank's sendbuff and writes the reduced block into every rank's recvbuff, so each input
// byte is read once and each output byte written once: the least traffic any all-reduce can
// make through memory. (The copy-in path of device_ipc_allreduce.h moves 2.75 times as much:
// the copy in, the reduce-scatter, the all-gather.) Per call:
//   1. on the calling thread, the ranks swap where their buffers are: each exports the
//      allocations its sendbuff and recvbuff lie in (IpcUserBuffers) and publishes them, with
//      the call's signature, in a shared-memory arena, then reads every peer's and maps the
//      peers' allocations it has not mapped yet; a second swap tells whether every rank could.
//      If some rank cannot export (a small allocation, a stream-ordered pool, VMM or managed
//      memory) or map, every rank takes the copy-in path for the call;
//   2. on the stream, after the previous IPC all-reduce: a barrier (every rank's stream has
//      reached the call: its sendbuff is ready and nothing earlier still reads its recvbuff);
//   3. the kernel: block r of every sendbuff -> block r of every recvbuff;
//   4. a barrier (every block is written, and no peer reads this rank's sendbuff any more).
// The swap makes the call wait, on the host, until every rank has issued it (as NCCL's
// registration of user buffers does); a kernel never waits for a peer. Opt-in: every rank sets
// WEFT_CUDA_IPC_DIRECT_MIN_BYTES (calls from that size go direct; under MPS on an H100 it beat
// copy-in from about 16 MiB). GPU builds only.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "api/device_ipc_allreduce.h"

namespace weft::api {

// What a rank tells the others about the direct path when IPC is set up.
struct DirectSetUp {
  uint64_t minBytes = UINT64_MAX;  // WEFT_CUDA_IPC_DIRECT_MIN_BYTES on this rank
  unsigned char ok = 0;            // it is set, and its arena is made
  char arenaName[63] = {};
};

// The set-up, around the IPC set-up's collectives: this rank's arena (on the calling thread);
// mapping the peers' (after the all-gather of every rank's DirectSetUp); then keeping the path,
// or dropping it where some rank could not map every arena (after the agreement). finishDirect
// also runs when a collective in between failed, so that no segment name is left behind.
DirectSetUp prepareDirect(const CommState& state, DeviceIpc& ipc);
bool attachDirect(DeviceIpc& ipc, int rank, const std::vector<DirectSetUp>& all);
void finishDirect(DeviceIpc& ipc, int rank, const std::vector<DirectSetUp>& all, bool agreed);

// Whether `call` goes direct; decided alike on every rank.
bool directApplies(const DeviceIpc& ipc, const core::CollectiveCall& call);

// Queues `call` on the direct path; false (nothing queued) where some rank cannot export its
// buffers, and the call must take the copy-in path.
Result<bool> enqueueIpcDirect(const std::shared_ptr<CommState>& state, gpuStream_t stream, const char* fn,
                              const core::CollectiveCall& call);

}  // namespace weft::api
