#include "api/device_issue.h"

#include <cstring>
#include <optional>

#include "api/buffer_use.h"
#include "api/host_stream.h"
#include "gpu/device_memory.h"
#include "kernels/cpu/reduce.h"
#include "util/log.h"
#if WEFT_HAVE_GPU
#include "api/device_ipc_allreduce.h"
#include "api/device_operation.h"
#include "gpu/stream_wait.h"
#include "kernels/gpu/reduce_kernels.h"
#endif

namespace weft::api {

using coll::Collective;

Result<bool> callIsOnDevice(const char* fn, const CommState& state, const core::CollectiveCall& call,
                            const BufferUse& use) {
  // One look for the driver per call, not one per buffer: with none loaded, nothing is device memory.
  if (call.count == 0 || gpu::deviceCount() == 0) return false;
  int sendDevice = -1, recvDevice = -1;
  const bool sendOnDevice = use.send && gpu::isDeviceMemory(call.send, &sendDevice);
  const bool recvOnDevice = use.recv && gpu::isDeviceMemory(call.recv, &recvDevice);
  if (!sendOnDevice && !recvOnDevice) return false;
  if (use.send && use.recv && sendOnDevice != recvOnDevice) {
    return Status(weftInvalidArgument, formatString("%s: sendbuff is %s memory but recvbuff is %s memory; both must be "
                                                    "device memory or both host memory",
                                                    fn, sendOnDevice ? "device" : "host", recvOnDevice ? "device" : "host"));
  }
  const int device = sendOnDevice ? sendDevice : recvDevice;
  if (state.device < 0) {
    return Status(weftInvalidUsage, formatString("%s: the buffers are on GPU %d, but the communicator was created "
                                                 "with no GPU current (call cudaSetDevice before weftCommInitRank)",
                                                 fn, device));
  }
  if (device != state.device) {
    return Status(weftInvalidArgument, formatString("%s: the buffers are on GPU %d, the communicator on GPU %d", fn,
                                                    device, state.device));
  }
  return true;
}

#if WEFT_HAVE_GPU
namespace {

size_t alignUp(size_t value, size_t to) { return (value + to - 1) / to * to; }

// One device call laid out in the operation's pinned staging.
struct StagedCall {
  core::CollectiveCall call;
  size_t sendBytes = 0, recvBytes = 0;  // staged in / out; 0 where the buffer is not used
  size_t sendAt = 0, gatherAt = 0, resultAt = 0, scalarAt = 0;  // offsets into the staging
  size_t block = 0;  // reductions: elements per rank's block
};

// Where each call's staged parts go; returns the staging bytes needed.
size_t layOut(std::vector<StagedCall>& staged, const CommState& state, const char* fn) {
  constexpr size_t kAlign = 256;
  const auto n = static_cast<size_t>(state.nranks);
  size_t total = 0;
  auto reserve = [&](size_t bytes) {
    const size_t at = total;
    total = alignUp(total + bytes, kAlign);
    return at;
  };
  for (StagedCall& s : staged) {
    const core::CollectiveCall& call = s.call;
    const size_t size = kernels::dataTypeSize(call.type);
    const BufferUse use = bufferUse(fn, call, state.rank, state.nranks).take();
    s.sendBytes = use.send ? use.sendBytes : 0;
    s.recvBytes = use.recv ? use.recvBytes : 0;
    if (coll::isReducing(call.collective)) {
      // Blocks of whole 16-byte packs, so that the kernel's loads stay vectorized.
      const size_t pack = 16 / size;
      s.block = call.collective == Collective::ReduceScatter ? call.count : alignUp((call.count + n - 1) / n, pack);
      s.sendAt = reserve(n * s.block * size);
      s.gatherAt = reserve(n * s.block * size);
      if (call.collective != Collective::ReduceScatter) s.resultAt = reserve(n * s.block * size);
      if (call.preMulSum) s.scalarAt = reserve(16);
    } else {
      if (s.sendBytes > 0) s.sendAt = reserve(s.sendBytes);
      if (s.recvBytes > 0) s.resultAt = reserve(s.recvBytes);
    }
  }
  return total;
}

CommOp runCalls(std::vector<core::CollectiveCall> calls) {
  return [calls = std::move(calls)](core::Communicator& c) { return c.runGroup(calls); };
}

// PreMulSum multiplies each rank's own input (as on host buffers): the staged input is scaled in
// place before it is exchanged.
struct StagedScaling {
  void* data;
  size_t count;
  weftDataType_t type;
  const void* scalar;  // in staging: written in stream order
};

Status enqueueStaged(const std::shared_ptr<CommState>& state, gpuStream_t stream, const char* fn,
                     std::vector<StagedCall> staged) {
  const size_t total = layOut(staged, *state, fn);
  auto op = std::make_shared<DeviceOperation>(state, stagingPoolOf(*state), fn);
  WEFT_TRY(op->allocate(total));
  unsigned char* host = op->hostStaging();
  unsigned char* device = op->deviceStaging();
  const int n = state->nranks, rank = state->rank;

  // Stage in: send buffers (and PreMulSum scalars) to pinned memory.
  std::vector<core::CollectiveCall> exchange, gather;
  std::vector<StagedScaling> scalings;
  for (const StagedCall& s : staged) {
    const size_t size = kernels::dataTypeSize(s.call.type);
    if (s.sendBytes > 0) {
      WEFT_TRY(checkRuntime(gpuMemcpyAsync(host + s.sendAt, s.call.send, s.sendBytes, gpuMemcpyDeviceToHost, stream),
                            "copying sendbuff to staging"));
    }
    core::CollectiveCall h = s.call;
    if (coll::isReducing(s.call.collective)) {
      const size_t blocks = static_cast<size_t>(n) * s.block * size;
      if (blocks > s.sendBytes) std::memset(host + s.sendAt + s.sendBytes, 0, blocks - s.sendBytes);  // padding
      if (s.call.preMulSum && s.call.scalarAt != nullptr) {
        WEFT_TRY(checkRuntime(gpuMemcpyAsync(host + s.scalarAt, s.call.scalarAt, size, gpuMemcpyDefault, stream),
                              "copying the PreMulSum scalar"));
      } else if (s.call.preMulSum) {
        std::memcpy(host + s.scalarAt, s.call.scalarValue.data(), size);
      }
      if (s.call.preMulSum) scalings.push_back({host + s.sendAt, blocks / size, s.call.type, host + s.scalarAt});
      // Every rank gets block r of every rank's input.
      h = core::CollectiveCall{};
      h.collective = Collective::AlltoAll;
      h.send = host + s.sendAt;
      h.recv = host + s.gatherAt;
      h.count = s.block;
      h.type = s.call.type;
    } else {
      h.send = s.sendBytes > 0 ? host + s.sendAt : nullptr;
      h.recv = s.recvBytes > 0 ? host + s.resultAt : nullptr;
    }
    exchange.push_back(h);
  }
  WEFT_TRY(enqueueHostPhase(op, stream, [scalings, run = runCalls(std::move(exchange))](core::Communicator& c) {
    for (const StagedScaling& s : scalings) kernels::scale(s.data, s.data, s.count, s.type, s.scalar);
    return run(c);
  }));

  // Reduce each rank's block on the GPU, from and (but for reduce-scatter) into mapped memory.
  bool anyReducing = false;
  for (const StagedCall& s : staged) anyReducing = anyReducing || coll::isReducing(s.call.collective);
  if (anyReducing) WEFT_TRY(op->copySkipFlag(stream));
  for (const StagedCall& s : staged) {
    if (!coll::isReducing(s.call.collective)) continue;
    const size_t size = kernels::dataTypeSize(s.call.type);
    const size_t mine = static_cast<size_t>(rank) * s.block * size;
    kernels::gpu::ReduceArgs args;
    args.inputs = device + s.gatherAt;
    args.inputStride = s.block;
    args.nInputs = n;
    args.count = s.block;
    args.type = s.call.type;
    args.op = s.call.op;
    args.divisor = static_cast<uint64_t>(n);
    args.skipIf = op->deviceSkipFlag();
    if (s.call.collective == Collective::ReduceScatter) {
      args.out = s.call.recv;
    } else {
      args.out = device + s.resultAt + mine;
      core::CollectiveCall g{};
      g.collective = s.call.collective == Collective::AllReduce ? Collective::AllGather : Collective::Gather;
      g.send = host + s.resultAt + mine;  // in place
      g.recv = host + s.resultAt;
      g.count = s.block;
      g.type = s.call.type;
      g.root = s.call.root;
      gather.push_back(g);
    }
    WEFT_TRY(checkRuntime(kernels::gpu::launchReduce(args, stream), "launching the reduction kernel"));
  }
  if (!gather.empty()) WEFT_TRY(enqueueHostPhase(op, stream, runCalls(std::move(gather))));

  // Stage out, then hand the staging memory back once the stream is past it.
  for (const StagedCall& s : staged) {
    if (s.recvBytes == 0 || s.call.collective == Collective::ReduceScatter) continue;
    WEFT_TRY(checkRuntime(gpuMemcpyAsync(s.call.recv, host + s.resultAt, s.recvBytes, gpuMemcpyHostToDevice, stream),
                          "copying the result from staging to recvbuff"));
  }
  return enqueueRelease(op, stream);
}

// One rank, no PreMulSum: every collective but send/recv is a copy on the device (or nothing,
// in place).
Status enqueueAlone(gpuStream_t stream, const char* fn, const core::CollectiveCall& call) {
  if (call.send == call.recv) return Status::ok();
  const BufferUse use = bufferUse(fn, call, 0, 1).take();
  return checkRuntime(gpuMemcpyAsync(call.recv, call.send, use.recvBytes, gpuMemcpyDeviceToDevice, stream),
                      "copying sendbuff to recvbuff");
}

Status enqueueOnDevice(const std::shared_ptr<CommState>& state, gpuStream_t stream, const char* fn,
                       const std::vector<core::CollectiveCall>& calls, bool grouped) {
  ScopedDevice onDevice(state->device);
  if (gpu::streamIsCapturing(stream)) {
    return Status(weftInvalidUsage, "the stream is being captured into a graph, which Weft's device path does not support");
  }
  if (!grouped && calls.size() == 1 && calls[0].count > 0) {
    const core::CollectiveCall& call = calls[0];
    const bool p2p = call.collective == Collective::Send || call.collective == Collective::Recv;
    if (state->nranks == 1 && !p2p && !call.preMulSum) return enqueueAlone(stream, fn, call);
    WEFT_ASSIGN_OR_RETURN(bool direct, ipcAllReduceApplies(*state, call));
    if (direct) return enqueueIpcAllReduce(state, stream, fn, call);
  }
  std::vector<StagedCall> staged;
  for (const core::CollectiveCall& call : calls) {
    if (call.count > 0) staged.push_back({call});
  }
  if (staged.empty()) return Status::ok();
  return enqueueStaged(state, stream, fn, std::move(staged));
}

}  // namespace

weftResult_t issueOnDevice(std::shared_ptr<CommState> state, void* stream, const char* fn,
                           std::vector<core::CollectiveCall> calls, bool grouped) {
  Status status = enqueueOnDevice(state, static_cast<gpuStream_t>(stream), fn, calls, grouped);
  return reportError(status.withContext(fn), state.get());
}

void quiesceDevice(CommState& state) {
  std::shared_ptr<gpu::StagingPool> pool;
  {
    std::lock_guard<std::mutex> lock(state.stagingMutex);
    pool = state.staging;
  }
  const int timeoutMs = state.config.timeoutMs;
  if (pool) {
    ScopedDevice onDevice(pool->device());  // waitIdle asks the current device whether it failed
    if (!pool->waitIdle(streamBackstopMs(timeoutMs))) return;
  }
  if (!state.ipc || !state.ipc->usable || !state.communicator) return;
  // Every rank closes its mappings of the others' memory, then they meet: only then may a rank
  // free its IPC buffers (and its user return its buffers' memory).
  closePeerMappings(state);
  Status met = state.engine.runBlocking([&state] { return state.communicator->barrier(); });
  if (!met.isOk()) WEFT_WARN("destroy: no barrier with the peers before freeing the CUDA IPC buffers: %s", met.message().c_str());
}

void releaseDeviceStaging(CommState& state) {
  std::shared_ptr<gpu::StagingPool> pool;
  {
    std::lock_guard<std::mutex> lock(state.stagingMutex);
    pool = std::move(state.staging);
  }
  std::optional<ScopedDevice> onDevice;  // waitIdle asks the current device whether it failed
  if (state.device >= 0) onDevice.emplace(state.device);
  if (pool && !pool->waitIdle(streamBackstopMs(state.config.timeoutMs))) {
    // Operations never ended (or the GPU failed): the GPU may still use this memory, and a
    // stream callback may drop the last reference to the communicator, where no runtime call
    // is allowed. Keep it all, deliberately.
    new std::shared_ptr<DeviceIpc>(std::move(state.ipc));
    new std::shared_ptr<gpu::StagingPool>(std::move(pool));
    return;
  }
  if (pool) pool->freeAll();
  releaseDeviceIpc(state);
}

#else  // no GPU runtime: no buffer is ever on a device

weftResult_t issueOnDevice(std::shared_ptr<CommState> state, void*, const char* fn, std::vector<core::CollectiveCall>,
                           bool) {
  return reportError(Status(weftInvalidUsage, std::string(fn) + ": this Weft was built without GPU support"),
                     state.get());
}

void quiesceDevice(CommState&) {}
void releaseDeviceStaging(CommState&) {}

#endif

}  // namespace weft::api
