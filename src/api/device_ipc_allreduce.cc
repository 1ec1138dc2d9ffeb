#include "api/device_ipc_allreduce.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "api/device_ipc_direct.h"
#include "api/device_ipc_sync.h"
#include "api/device_operation.h"
#include "gpu/stream_wait.h"
#include "kernels/cpu/reduce.h"
#include "kernels/gpu/reduce_kernels.h"
#include "util/env.h"
#include "util/log.h"

namespace weft::api {

using coll::Collective;
using transport::cuda_ipc::IpcBuffers;
using transport::cuda_ipc::IpcHandle;
using transport::cuda_ipc::kHandleBytes;

namespace {

constexpr int64_t kDefaultBufferBytes = int64_t{256} << 20;
size_t alignUp(size_t value, size_t to) { return (value + to - 1) / to * to; }

// What each rank tells the others at set-up: the two buffers' handles and the signals'.
struct SetUpRecord {
  uint64_t bufferBytes = 0;  // ranks may size them differently: the smallest is used
  unsigned char ok = 0;
  unsigned char deviceBarriers = 0;
  unsigned char handles[3][kHandleBytes] = {};
  DirectSetUp direct;
};

// Allocates and exports this rank's buffers, swaps handles with every rank, maps the peers'
// buffers, and agrees with every rank on whether all of that worked everywhere; likewise for
// the direct path's arena.
Status setUp(CommState& state) {
  auto ipc = std::make_shared<DeviceIpc>();
  state.ipc = ipc;  // unusable until the end: a failure is not tried again
  SetUpRecord mine;
  // A bad value turns IPC off here, and so everywhere: this rank must still take part in the
  // set-up collectives below, which its peers run.
  auto wanted = envInt("WEFT_CUDA_IPC", 0, 1);
  if (!wanted.isOk()) WEFT_WARN("CUDA IPC off: %s", wanted.status().message().c_str());
  bool able = wanted.isOk() && wanted.value().value_or(1) == 1;
  if (able) {
    if (Status made = checkRuntime(gpuEventCreateWithFlags(&ipc->done, gpuEventDisableTiming), "creating an event");
        !made.isOk()) {
      WEFT_INFO("CUDA IPC off for this communicator: %s", made.message().c_str());
      able = false;
    }
  }
  auto bytes = envByteSize("WEFT_CUDA_IPC_BUFFER_BYTES", 1 << 20, uint64_t{1} << 40);
  if (!bytes.isOk()) {
    WEFT_WARN("CUDA IPC off: %s", bytes.status().message().c_str());
    able = false;
  }
  const auto bufferBytes = static_cast<size_t>(bytes.isOk() ? bytes.value().value_or(kDefaultBufferBytes) : 0);
  mine.bufferBytes = bufferBytes;
  for (int k = 0; k < 2 && able; ++k) {
    auto made = IpcBuffers::allocate(bufferBytes);
    if (!made.isOk()) {
      WEFT_INFO("CUDA IPC off for this communicator: %s", made.status().message().c_str());
      able = false;
      break;
    }
    ipc->buffers[k] = made.take();
    std::memcpy(mine.handles[k], ipc->buffers[k]->handle().data(), kHandleBytes);
  }
  mine.ok = able ? 1 : 0;
  // Device barriers need stream memory operations, the signals and a stream to release them.
  const std::string sync = envString("WEFT_CUDA_IPC_SYNC").value_or("device");
  if (sync != "device" && sync != "host") {
    WEFT_WARN("WEFT_CUDA_IPC_SYNC=\"%s\" is not device or host: barriers on the device where they can be", sync.c_str());
  }
  if (able && sync != "host" && gpu::streamMemoryOpsAvailable()) {
    auto made = IpcBuffers::allocate(static_cast<size_t>(state.nranks) * kSignalStride);
    if (made.isOk() && gpuStreamCreateWithFlags(&ipc->rescue, gpuStreamNonBlocking) == gpuSuccess &&
        gpuHostAlloc(reinterpret_cast<void**>(&ipc->markRead), sizeof *ipc->markRead, 0) == gpuSuccess) {
      ipc->signals = made.take();
      std::memcpy(mine.handles[2], ipc->signals->handle().data(), kHandleBytes);
      mine.deviceBarriers = 1;
    } else {
      (void)gpuGetLastError();
      WEFT_INFO("CUDA IPC barriers go through the host: %s",
                made.isOk() ? "no stream or pinned word for the signals" : made.status().message().c_str());
    }
  }

  if (able && mine.deviceBarriers == 1) mine.direct = prepareDirect(state, *ipc);

  const auto n = static_cast<size_t>(state.nranks);
  std::vector<SetUpRecord> all(n);
  std::vector<DirectSetUp> directs(n);
  uint8_t opened[3] = {0, 0, 0};  // the buffers, the signals, the direct path's arenas
  Status status = state.engine.runBlocking([&]() -> Status {
    core::Communicator* c = state.communicator.get();
    if (c == nullptr) return Status(weftInvalidUsage, "the communicator was destroyed");
    ScopedDevice onDevice(state.device);
    WEFT_TRY(c->run(core::CollectiveCall{Collective::AllGather, &mine, all.data(), sizeof mine, weftUint8}));
    bool everyone = true, deviceBarriers = true;
    ipc->bytes = bufferBytes;
    for (size_t r = 0; r < n; ++r) directs[r] = all[r].direct;
    for (const SetUpRecord& r : all) {
      everyone = everyone && r.ok == 1;
      deviceBarriers = deviceBarriers && r.deviceBarriers == 1;
      ipc->bytes = std::min<size_t>(ipc->bytes, r.bufferBytes);
    }
    auto open = [&](IpcBuffers& buffers, int k) {
      std::vector<IpcHandle> handles(n);
      for (size_t r = 0; r < n; ++r) std::memcpy(handles[r].data(), all[r].handles[k], kHandleBytes);
      Status s = buffers.openPeers(handles, state.rank);
      if (!s.isOk()) WEFT_INFO("CUDA IPC: %s", s.message().c_str());
      return s.isOk();
    };
    if (everyone) {
      opened[0] = open(*ipc->buffers[0], 0) && open(*ipc->buffers[1], 1) ? 1 : 0;
      opened[1] = opened[0] == 1 && deviceBarriers && open(*ipc->signals, 2) ? 1 : 0;
      opened[2] = opened[1] == 1 && attachDirect(*ipc, state.rank, directs) ? 1 : 0;
    }
    // Usable only if every rank mapped every buffer (a byte-wise min over ranks).
    core::CollectiveCall agree{Collective::AllReduce, opened, opened, 3, weftUint8};
    agree.op = weftMin;
    WEFT_TRY(c->run(agree));
    ipc->usable = opened[0] == 1;
    if (opened[1] == 0) ipc->signals.reset();
    return Status::ok();
  });
  finishDirect(*ipc, state.rank, directs, status.isOk() && opened[2] == 1);
  if (!ipc->usable) {
    ScopedDevice onDevice(state.device);
    ipc->buffers[0].reset();
    ipc->buffers[1].reset();
    ipc->signals.reset();
  }
  WEFT_INFO("CUDA IPC all-reduce %s%s%s", ipc->usable ? "on" : "off",
            !ipc->usable ? "" : ipc->signals ? ", barriers on the device" : ", barriers through the host",
            ipc->userBuffers ? formatString(", in place from %zu bytes", ipc->directMinBytes).c_str() : "");
  return status.withContext("setting up CUDA IPC");
}

}  // namespace

DeviceIpc::~DeviceIpc() {
  if (done != nullptr) (void)gpuEventDestroy(done);
  if (rescue != nullptr) (void)gpuStreamDestroy(rescue);
  if (markRead != nullptr) (void)gpuFreeHost(markRead);
}

Result<bool> ipcAllReduceApplies(CommState& state, const core::CollectiveCall& call) {
  if (call.collective != Collective::AllReduce || state.nranks < 2 || state.nranks > kernels::gpu::kMaxListedInputs ||
      !state.communicator->deviceIpcEverywhere()) {
    return false;
  }
  if (!state.ipc) WEFT_TRY(setUp(state));
  return state.ipc->usable;
}

Status enqueueIpcAllReduce(const std::shared_ptr<CommState>& state, gpuStream_t stream, const char* fn,
                           const core::CollectiveCall& call) {
  DeviceIpc& ipc = *state->ipc;
  const int n = state->nranks, rank = state->rank;
  const auto un = static_cast<size_t>(n), urank = static_cast<size_t>(rank);
  const size_t size = kernels::dataTypeSize(call.type);
  const size_t pack = 16 / size;
  // Pieces of whole blocks of whole 16-byte packs.
  const size_t pieceCount = ipc.bytes / size / (un * pack) * (un * pack);

  if (ipc.broken) {
    return Status(weftRemoteError, "an earlier all-reduce on device buffers failed (see weftCommGetAsyncError); "
                                   "the communicator cannot be used for another");
  }
  if (directApplies(ipc, call)) {
    WEFT_ASSIGN_OR_RETURN(bool queued, enqueueIpcDirect(state, stream, fn, call));
    if (queued) return Status::ok();
  }
  // The operation before the guard: a failure below destroys the guard first, whose release
  // must find the operation still queued to set its skip flag before the counters move.
  auto op = std::make_shared<DeviceOperation>(state, stagingPoolOf(*state), fn);
  BreakUnlessQueued guard{state};
  WEFT_TRY(op->allocate(16));  // the PreMulSum scalar
  trackQueued(ipc, op);
  if (ipc.doneRecorded) {
    WEFT_TRY(checkRuntime(gpuStreamWaitEvent(stream, ipc.done, 0), "waiting for the previous CUDA IPC all-reduce"));
  }
  // Two barriers per piece. Where the device's waits do not compare cyclically (HIP), an
  // operation whose barriers would carry the counters past 2^32 takes host phases instead, as
  // do all later ones that would: every rank counts alike, so all switch at the same call.
  const uint64_t barriersNeeded = 2 * ((call.count + pieceCount - 1) / pieceCount);
  const bool countersLast = gpu::kStreamWaitIsCyclic || ipc.barriers.load() + barriersNeeded < UINT32_MAX;
  const bool onDevice = ipc.signals != nullptr && countersLast;
  guard.onDevice = onDevice;
  gpuEvent_t started = nullptr;
  if (onDevice) {
    WEFT_ASSIGN_OR_RETURN(started, op->pool->acquireEvent());
    op->events.push_back(started);
    WEFT_TRY(checkRuntime(gpuEventRecord(started, stream), "recording an event on the stream"));
  }
  auto barrier = [&]() -> Status {
    if (onDevice) return queueDeviceBarrier(ipc, rank, n, stream);
    return enqueueHostPhase(op, stream, [](core::Communicator& c) { return c.barrier(); });
  };
  const void* scalar = nullptr;
  if (call.preMulSum) {  // into device memory, where every block of the scaling kernel reads it
    const void* from = call.scalarAt;
    if (from == nullptr) {
      std::memcpy(op->hostStaging(), call.scalarValue.data(), size);
      from = op->hostStaging();
    }
    WEFT_TRY(checkRuntime(gpuMemcpyAsync(op->deviceScalar(), from, size, gpuMemcpyDefault, stream),
                          "copying the PreMulSum scalar"));
    scalar = op->deviceScalar();
  }
  // A small call's kernels read the skip flag where the host writes it: two copies fewer on the
  // stream, each costing more than the few reads over the bus.
  const bool mappedSkip = call.count * size <= DeviceOperation::kMappedSkipMaxBytes;
  const int* skipIf = mappedSkip ? op->mappedSkipFlag() : op->deviceSkipFlag();
  // With device barriers a failed peer's stream still signals ours through: its mark stops them.
  const uint32_t* skipIfMarked = ipc.signals ? signalOf(ipc, rank, rank) : nullptr;
  auto refreshSkipFlag = [&]() { return mappedSkip ? Status::ok() : op->copySkipFlag(stream); };
  const auto* send = static_cast<const unsigned char*>(call.send);
  auto* recv = static_cast<unsigned char*>(call.recv);
  for (size_t offset = 0; offset < call.count; offset += pieceCount) {
    const size_t count = std::min(pieceCount, call.count - offset);
    const size_t block = alignUp((count + un - 1) / un, pack);
    IpcBuffers& buffers = *ipc.buffers[ipc.next];
    ipc.next ^= 1;

    if (scalar == nullptr) {
      WEFT_TRY(checkRuntime(gpuMemcpyAsync(buffers.of(rank), send + offset * size, count * size,
                                           gpuMemcpyDeviceToDevice, stream),
                            "copying sendbuff into the CUDA IPC buffer"));
    } else {  // PreMulSum scales each rank's own input, on the way in
      kernels::gpu::ReduceArgs scale;
      scale.listed = true;
      scale.inputList[0] = send + offset * size;
      scale.out = buffers.of(rank);
      scale.count = count;
      scale.type = call.type;
      scale.scalar = scalar;
      WEFT_TRY(checkRuntime(kernels::gpu::launchReduce(scale, stream), "launching the PreMulSum scaling"));
    }
    WEFT_TRY(barrier());
    WEFT_TRY(refreshSkipFlag());

    kernels::gpu::ReduceArgs reduce;
    reduce.listed = true;
    reduce.nInputs = n;
    reduce.inputList[0] = buffers.of(rank) + urank * block * size;  // its own first: out aliases it
    for (int q = 0, j = 1; q < n; ++q) {
      if (q != rank) reduce.inputList[j++] = buffers.of(q) + urank * block * size;
    }
    reduce.out = buffers.of(rank) + urank * block * size;
    reduce.count = block;
    reduce.type = call.type;
    reduce.op = call.op;
    reduce.divisor = un;
    reduce.skipIf = skipIf;
    reduce.skipIfMarked = skipIfMarked;
    WEFT_TRY(checkRuntime(kernels::gpu::launchReduce(reduce, stream), "launching the reduce-scatter kernel"));
    WEFT_TRY(barrier());
    WEFT_TRY(refreshSkipFlag());

    for (size_t q = 0; q < un; ++q) {
      const size_t first = q * block;
      if (first >= count) break;
      kernels::gpu::ReduceArgs gather;
      gather.listed = true;
      gather.nInputs = 1;
      gather.inputList[0] = buffers.of(static_cast<int>(q)) + first * size;
      gather.out = recv + (offset + first) * size;
      gather.count = std::min(block, count - first);
      gather.type = call.type;
      gather.skipIf = skipIf;
      gather.skipIfMarked = skipIfMarked;
      WEFT_TRY(checkRuntime(kernels::gpu::launchReduce(gather, stream), "launching the all-gather copy"));
    }
  }
  WEFT_TRY(checkRuntime(gpuEventRecord(ipc.done, stream), "recording the end of the CUDA IPC all-reduce"));
  ipc.doneRecorded = true;
  if (onDevice) {
    WEFT_TRY(enqueueWatch(op, stream, started, [state] { return checkPeers(state); }, [state] { releaseBarriers(state); }));
  }
  guard.queued = true;
  return enqueueRelease(op, stream);
}

void closePeerMappings(CommState& state) {
  if (!state.ipc) return;
  DeviceIpc& ipc = *state.ipc;
  ScopedDevice onDevice(state.device);
  // A failure's release may still be writing the peers' counters.
  if (ipc.rescue != nullptr && gpuStreamSynchronize(ipc.rescue) != gpuSuccess) (void)gpuGetLastError();
  for (auto& buffers : ipc.buffers) {
    if (buffers) buffers->closePeers();
  }
  if (ipc.signals) ipc.signals->closePeers();
  if (ipc.userBuffers) ipc.userBuffers->closeAll();
}

void releaseDeviceIpc(CommState& state) {
  if (!state.ipc) return;
  ScopedDevice onDevice(state.device);
  state.ipc.reset();
}

}  // namespace weft::api
