#include "api/device_ipc_direct.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>
#include <string>

#include "api/device_ipc_sync.h"
#include "api/device_operation.h"
#include "coll/arena_wait.h"
#include "gpu/stream_wait.h"
#include "kernels/cpu/reduce.h"
#include "kernels/gpu/reduce_kernels.h"
#include "util/deadline.h"
#include "util/env.h"
#include "util/log.h"

namespace weft::api {

using transport::cuda_ipc::ExportedBuffer;

namespace {

// Where this rank's buffers of one call are, as its peers need it.
struct DirectRecord {
  enum : uint32_t { kExported = 1, kNotExportable = 2, kTooSmall = 3, kMapped = 4, kNotMapped = 5 };
  uint64_t tag;  // core::messageTag of the call, alike on every rank of one call
  uint32_t state;
  uint32_t reserved;
  ExportedBuffer send, recv;
};

// Publishes this rank's record and waits for every peer's, within the timeout. On the calling
// thread, so the arena's wait gets no connections (the engine's thread owns them).
Status swapRecords(CommState& state, const DirectRecord& mine, std::vector<DirectRecord>* all) {
  DeviceIpc& ipc = *state.ipc;
  transport::ShmArena& arena = *ipc.exchange;
  const uint32_t seq = ++ipc.exchangeSeq;
  std::memcpy(arena.ownData(seq, sizeof mine), &mine, sizeof mine);
  arena.publish(seq, sizeof mine, mine.tag);
  all->assign(static_cast<size_t>(state.nranks), mine);
  const coll::ExecutionContext context{state.nranks, "all-reduce", Deadline::never(), state.config.timeoutMs,
                                       &state.abortFlag, nullptr};
  std::optional<Deadline> deadline;
  for (int q = 0; q < state.nranks; ++q) {
    if (q == state.rank) continue;
    WEFT_TRY(coll::awaitPublished(arena, q, seq, context, &deadline));
    std::memcpy(&(*all)[static_cast<size_t>(q)], arena.peerData(q, seq, sizeof mine), sizeof mine);
  }
  return Status::ok();
}

std::string arenaNameOf(const DirectSetUp& r) { return std::string(r.arenaName, strnlen(r.arenaName, sizeof r.arenaName)); }

}  // namespace

DirectSetUp prepareDirect(const CommState& state, DeviceIpc& ipc) {
  DirectSetUp mine;
  auto minBytes = envByteSize("WEFT_CUDA_IPC_DIRECT_MIN_BYTES", 0, UINT64_MAX);
  if (!minBytes.isOk()) {
    WEFT_WARN("the direct CUDA IPC all-reduce is off: %s", minBytes.status().message().c_str());
    return mine;
  }
  // Off unless asked for: the buffers it shares must stay allocated until destroy (a free of
  // memory a peer maps is undefined in CUDA), which a user accepts by asking.
  if (!minBytes.value().has_value()) return mine;
  mine.minBytes = static_cast<uint64_t>(*minBytes.value());
  auto made = transport::ShmArena::create(formatString("%08x-ipc-%d", state.communicator->secretDigest(), state.rank),
                                          state.rank, state.nranks, sizeof(DirectRecord));
  if (!made.isOk()) {
    WEFT_INFO("the direct CUDA IPC all-reduce is off: %s", made.status().message().c_str());
    return mine;
  }
  ipc.exchange = made.take();
  static_assert(sizeof mine.arenaName > transport::ShmSegment::kMaxNameLength);
  std::memcpy(mine.arenaName, ipc.exchange->ownName().c_str(), ipc.exchange->ownName().size() + 1);
  mine.ok = 1;
  return mine;
}

bool attachDirect(DeviceIpc& ipc, int rank, const std::vector<DirectSetUp>& all) {
  if (!ipc.exchange) return false;
  for (size_t q = 0; q < all.size(); ++q) {
    if (static_cast<int>(q) == rank) continue;
    if (all[q].ok != 1) return false;
    if (Status s = ipc.exchange->attach(static_cast<int>(q), arenaNameOf(all[q])); !s.isOk()) {
      WEFT_INFO("the direct CUDA IPC all-reduce is off: %s", s.message().c_str());
      return false;
    }
  }
  return true;
}

void finishDirect(DeviceIpc& ipc, int rank, const std::vector<DirectSetUp>& all, bool agreed) {
  if (ipc.exchange) ipc.exchange->unlinkOwn();
  if (agreed) {
    uint64_t most = 0;
    for (const DirectSetUp& r : all) most = std::max(most, r.minBytes);
    ipc.directMinBytes = static_cast<size_t>(most);
    ipc.userBuffers = std::make_unique<transport::cuda_ipc::IpcUserBuffers>(static_cast<int>(all.size()));
    return;
  }
  // A peer may have failed after making its arena, and never remove its name.
  for (size_t q = 0; q < all.size(); ++q) {
    if (static_cast<int>(q) != rank && all[q].ok == 1) {
      transport::ShmSegment::removeName(arenaNameOf(all[q]));
    }
  }
  ipc.exchange.reset();
}

bool directApplies(const DeviceIpc& ipc, const core::CollectiveCall& call) {
  // Two barriers on the device; where the waits do not compare cyclically (HIP), not past 2^32.
  const bool countersLast = gpu::kStreamWaitIsCyclic || ipc.barriers.load() + 2 < UINT32_MAX;
  return ipc.userBuffers != nullptr && ipc.signals != nullptr && countersLast && !call.preMulSum &&
         call.count * kernels::dataTypeSize(call.type) >= ipc.directMinBytes;
}

Result<bool> enqueueIpcDirect(const std::shared_ptr<CommState>& state, gpuStream_t stream, const char* fn,
                              const core::CollectiveCall& call) {
  DeviceIpc& ipc = *state->ipc;
  const int n = state->nranks, rank = state->rank;
  const size_t size = kernels::dataTypeSize(call.type);
  const size_t bytes = call.count * size;

  DirectRecord mine{core::messageTag(call), DirectRecord::kExported, 0, {}, {}};
  auto exportBoth = [&]() -> Status {
    WEFT_ASSIGN_OR_RETURN(mine.send, ipc.userBuffers->exportBuffer(call.send, bytes));
    if (call.recv == call.send) {
      mine.recv = mine.send;
      return Status::ok();
    }
    WEFT_ASSIGN_OR_RETURN(mine.recv, ipc.userBuffers->exportBuffer(call.recv, bytes));
    return Status::ok();
  };
  const Status exported = exportBoth();
  if (!exported.isOk()) {
    mine.state = exported.code() == weftInvalidArgument ? DirectRecord::kTooSmall : DirectRecord::kNotExportable;
    static std::atomic<bool> said{false};
    if (mine.state == DirectRecord::kNotExportable && !said.exchange(true)) {
      WEFT_INFO("%s: buffers that cannot be shared through CUDA IPC are copied in: %s", fn, exported.message().c_str());
    }
  }
  std::vector<DirectRecord> all;
  if (Status swapped = swapRecords(*state, mine, &all); !swapped.isOk()) {
    ipc.broken = true;  // the ranks are out of step now
    return swapped;
  }
  for (int q = 0; q < n; ++q) {
    const DirectRecord& r = all[static_cast<size_t>(q)];
    if (r.tag != mine.tag) {
      return Status(weftInvalidUsage, formatString("rank %d is in a different all-reduce (another count, type or "
                                                   "operator): every rank must make the same calls in the same order",
                                                   q));
    }
    if (r.state == DirectRecord::kTooSmall) {
      return q == rank ? exported : Status(weftInvalidArgument, formatString("rank %d's buffers are smaller than the call", q));
    }
  }
  if (std::any_of(all.begin(), all.end(), [](const DirectRecord& r) { return r.state != DirectRecord::kExported; })) {
    return false;
  }

  const auto un = static_cast<size_t>(n);
  const size_t pack = 16 / size;
  const size_t block = (call.count + un * pack - 1) / (un * pack) * pack;
  const size_t first = std::min(call.count, static_cast<size_t>(rank) * block);
  kernels::gpu::ReduceArgs reduce;
  reduce.listed = true;
  reduce.nInputs = n;
  reduce.nOutputs = n;
  reduce.count = std::min(block, call.count - first);
  reduce.type = call.type;
  reduce.op = call.op;
  reduce.divisor = un;
  auto quiesce = [&]() -> Status {  // the previous call, which may wait on a peer, within the timeout
    if (!ipc.doneRecorded) return Status::ok();
    const int timeoutMs = state->config.timeoutMs;
    return waitForEvent(ipc.done, Deadline::afterMs(timeoutMs), state->abortFlag, timeoutMs);
  };
  auto mapPeers = [&]() -> Status {
    ipc.userBuffers->beginCall();
    for (int q = 0; q < n; ++q) {
      const auto* send = static_cast<const unsigned char*>(call.send);
      auto* recv = static_cast<unsigned char*>(call.recv);
      if (q != rank) {
        const DirectRecord& r = all[static_cast<size_t>(q)];
        WEFT_ASSIGN_OR_RETURN(unsigned char* peerSend, ipc.userBuffers->map(q, r.send, quiesce));
        WEFT_ASSIGN_OR_RETURN(recv, ipc.userBuffers->map(q, r.recv, quiesce));
        send = peerSend;
      }
      reduce.inputList[q] = send + first * size;
      reduce.outputList[q] = recv + first * size;
    }
    return Status::ok();
  };
  // Whether every rank mapped its peers' buffers (and has what the stream needs): a second
  // swap, so that all ranks still take the same path when one could not.
  auto op = std::make_shared<DeviceOperation>(state, stagingPoolOf(*state), fn);
  gpuEvent_t started = nullptr;
  auto prepare = [&]() -> Status {
    WEFT_TRY(mapPeers());
    WEFT_TRY(op->allocate(0));
    WEFT_ASSIGN_OR_RETURN(started, op->pool->acquireEvent());
    op->events.push_back(started);
    return Status::ok();
  };
  const Status mapped = prepare();
  if (!mapped.isOk()) WEFT_WARN("%s: the all-reduce copies in: %s", fn, mapped.message().c_str());
  DirectRecord verdict{mine.tag, mapped.isOk() ? DirectRecord::kMapped : DirectRecord::kNotMapped, 0, {}, {}};
  std::vector<DirectRecord> verdicts;
  if (Status swapped = swapRecords(*state, verdict, &verdicts); !swapped.isOk()) {
    ipc.broken = true;
    return swapped;
  }
  if (std::any_of(verdicts.begin(), verdicts.end(), [](const DirectRecord& r) { return r.state != DirectRecord::kMapped; })) {
    op->released = true;  // nothing was queued with its memory
    return false;
  }

  // Every rank queues this call from here on: a failure must release its peers.
  BreakUnlessQueued guard{state, true};
  trackQueued(ipc, op);
  reduce.skipIf = op->deviceSkipFlag();
  reduce.skipIfMarked = signalOf(ipc, rank, rank);  // a failed peer's stream still signals ours through
  if (ipc.doneRecorded) {
    WEFT_TRY(checkRuntime(gpuStreamWaitEvent(stream, ipc.done, 0), "waiting for the previous CUDA IPC all-reduce"));
  }
  WEFT_TRY(checkRuntime(gpuEventRecord(started, stream), "recording an event on the stream"));
  WEFT_TRY(queueDeviceBarrier(ipc, rank, n, stream));
  WEFT_TRY(op->copySkipFlag(stream));
  WEFT_TRY(checkRuntime(kernels::gpu::launchReduce(reduce, stream), "launching the all-reduce kernel"));
  WEFT_TRY(queueDeviceBarrier(ipc, rank, n, stream));
  WEFT_TRY(checkRuntime(gpuEventRecord(ipc.done, stream), "recording the end of the CUDA IPC all-reduce"));
  ipc.doneRecorded = true;
  WEFT_TRY(enqueueWatch(op, stream, started, [state] { return checkPeers(state); }, [state] { releaseBarriers(state); }));
  guard.queued = true;
  WEFT_TRY(enqueueRelease(op, stream));
  return true;
}

}  // namespace weft::api
