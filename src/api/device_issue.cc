#include "api/device_issue.h"

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "api/buffer_use.h"
#include "api/host_stream.h"
#include "gpu/device_memory.h"
#include "kernels/cpu/reduce.h"
#if WEFT_HAVE_GPU
#include "gpu/staging_pool.h"
#include "kernels/gpu/reduce_kernels.h"
#endif

namespace weft::api {

using coll::Collective;

Result<bool> callIsOnDevice(const char* fn, const CommState& state, const core::CollectiveCall& call) {
  if (call.count == 0) return false;
  WEFT_ASSIGN_OR_RETURN(BufferUse use, bufferUse(fn, call, state.rank, state.nranks));
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

constexpr size_t kStagingAlign = 256;
size_t alignUp(size_t value, size_t to) { return (value + to - 1) / to * to; }

// Makes the communicator's device current for a scope, restoring the caller's.
class ScopedDevice {
 public:
  explicit ScopedDevice(int device) {
    if (gpuGetDevice(&previous_) != gpuSuccess) previous_ = -1;
    if (previous_ != device) (void)gpuSetDevice(device);
  }
  ~ScopedDevice() {
    if (previous_ >= 0) (void)gpuSetDevice(previous_);
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

 private:
  int previous_ = -1;
};

// The end of a host phase, which the stream's callback waits for.
class PhaseLatch {
 public:
  void set(Status status) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (done_) return;
    done_ = true;
    status_ = std::move(status);
    changed_.notify_all();
  }
  bool wait(int timeoutMs) {
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_for(lock, std::chrono::milliseconds(timeoutMs), [&] { return done_; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool done_ = false;
  Status status_;
};

// One device call laid out in the operation's pinned buffer.
struct StagedCall {
  core::CollectiveCall call;
  size_t sendBytes = 0, recvBytes = 0;  // staged in / out; 0 where the buffer is not used
  size_t sendAt = 0, gatherAt = 0, resultAt = 0, scalarAt = 0;  // offsets into the pinned buffer
  size_t block = 0;  // reductions: elements per rank's block
};

// What a device operation's stream callbacks and engine jobs share. The last of them to let go
// returns the staging memory; nothing here calls the runtime, so that may be a stream callback.
struct DeviceOperation {
  DeviceOperation(std::shared_ptr<CommState> s, std::shared_ptr<gpu::StagingPool> p, const char* f)
      : state(std::move(s)), pool(std::move(p)), fn(f) {
    pool->operationStarted();
  }
  ~DeviceOperation() {
    // Staging memory is reused only when the stream is known to be done with it: the release
    // callback ran. An operation abandoned halfway (a runtime error while queueing) keeps it.
    if (pinned.host != nullptr && released) pool->release(pinned);
    if (released) {
      for (gpuEvent_t event : events) pool->release(event);
    }
    pool->operationEnded();
  }

  // A failure is what weftCommGetAsyncError reports, and later phases do not run.
  void fail(const Status& status) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (!failure.isOk()) return;
      failure = status;
    }
    int expected = weftSuccess;
    state->backgroundError.compare_exchange_strong(expected, status.code());
    reportError(status, state.get());
  }
  Status failed() {
    std::lock_guard<std::mutex> lock(mutex);
    return failure;
  }

  std::shared_ptr<CommState> state;
  std::shared_ptr<gpu::StagingPool> pool;
  const char* fn;
  gpu::PinnedBuffer pinned;
  std::vector<gpuEvent_t> events;
  std::atomic<bool> released{false};  // set by the release callback, the stream's last step
  std::mutex mutex;
  Status failure;
};

using OperationRef = std::shared_ptr<DeviceOperation>;

struct PhaseWait {
  OperationRef op;
  std::shared_ptr<PhaseLatch> latch;
};

// Stream callback: holds the stream until the host phase ends (it always does, by its own
// deadlines; the backstop only guards against a lost engine).
void waitForPhase(void* arg) {
  std::unique_ptr<PhaseWait> wait(static_cast<PhaseWait*>(arg));
  const int backstopMs = streamBackstopMs(wait->op->state->config.timeoutMs);
  if (!wait->latch->wait(backstopMs)) {
    wait->op->fail(Status(weftTimeout, formatString("%s: the host side of the operation did not finish within %d ms",
                                                    wait->op->fn, backstopMs)));
  }
}

// Stream callback, the operation's last step on the stream.
void releaseOperation(void* arg) {
  std::unique_ptr<OperationRef> op(static_cast<OperationRef*>(arg));
  (*op)->released = true;
}

// Waits, on the engine's thread, for the stream to reach `event` (the staging copies).
Status waitForEvent(gpuEvent_t event, const Deadline& deadline, const std::atomic<bool>& abortFlag, int timeoutMs) {
  for (int polls = 0;; ++polls) {
    gpuError_t err = gpuEventQuery(event);
    if (err == gpuSuccess) return Status::ok();
    if (err != gpuErrorNotReady) {
      (void)gpuGetLastError();
      return gpu::runtimeError(err, "waiting for the stream to stage the send buffers");
    }
    if (abortFlag.load()) return Status(weftRemoteError, "the communicator was aborted");
    if (deadline.expired()) {
      return Status(weftTimeout, formatString("the stream did not reach this operation within %d ms (is earlier work "
                                              "on the stream waiting for it?)",
                                              timeoutMs));
    }
    if (polls < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

// Queues a host phase: an event after the stream's work so far, the engine job that waits for
// it and runs `calls` on the staged bytes, and the stream callback that waits for the job.
Status enqueueHostPhase(const OperationRef& op, gpuStream_t stream, std::vector<core::CollectiveCall> calls) {
  CommState& state = *op->state;
  WEFT_ASSIGN_OR_RETURN(gpuEvent_t event, op->pool->acquireEvent());
  op->events.push_back(event);
  if (gpuError_t err = gpuEventRecord(event, stream); err != gpuSuccess) {
    (void)gpuGetLastError();
    return gpu::runtimeError(err, "recording an event on the stream");
  }
  auto latch = std::make_shared<PhaseLatch>();
  Status queued = state.engine.enqueue([op, event, latch, calls = std::move(calls)]() {
    ScopedDevice onDevice(op->pool->device());
    const int timeoutMs = op->state->config.timeoutMs;
    Status status = op->failed();
    if (status.isOk()) status = waitForEvent(event, Deadline::afterMs(timeoutMs), op->state->abortFlag, timeoutMs);
    if (status.isOk()) {
      core::Communicator* c = op->state->communicator.get();
      status = c == nullptr ? Status(weftInvalidUsage, "the communicator was destroyed") : c->runGroup(calls);
      if (c != nullptr) status = status.withContext(formatString("%s (rank %d of %d)", op->fn, c->rank(), c->size()));
    }
    if (!status.isOk()) op->fail(status);
    latch->set(status);
    return status;
  });
  WEFT_TRY(queued);
  auto* wait = new PhaseWait{op, latch};
  if (gpuError_t err = gpuLaunchHostCallback(stream, waitForPhase, wait); err != gpuSuccess) {
    delete wait;
    (void)gpuGetLastError();
    return gpu::runtimeError(err, "queueing a host callback on the stream");
  }
  return Status::ok();
}

std::shared_ptr<gpu::StagingPool> stagingPoolOf(CommState& state) {
  std::lock_guard<std::mutex> lock(state.stagingMutex);
  if (!state.staging) state.staging = std::make_shared<gpu::StagingPool>(state.device);
  return state.staging;
}

// Where each call's staged parts go; returns the pinned bytes needed.
size_t layOut(std::vector<StagedCall>& staged, const CommState& state, const char* fn) {
  const auto n = static_cast<size_t>(state.nranks);
  size_t total = 0;
  auto reserve = [&](size_t bytes) {
    const size_t at = total;
    total = alignUp(total + bytes, kStagingAlign);
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

Status enqueueOnDevice(const std::shared_ptr<CommState>& state, gpuStream_t stream, const char* fn,
                       const std::vector<core::CollectiveCall>& calls) {
  ScopedDevice onDevice(state->device);
  std::vector<StagedCall> staged;
  for (const core::CollectiveCall& call : calls) {
    if (call.count > 0) staged.push_back({call});
  }
  if (staged.empty()) return Status::ok();
  const size_t total = layOut(staged, *state, fn);
  auto op = std::make_shared<DeviceOperation>(state, stagingPoolOf(*state), fn);
  WEFT_ASSIGN_OR_RETURN(op->pinned, op->pool->acquireBuffer(total));
  auto* host = static_cast<unsigned char*>(op->pinned.host);
  auto* device = static_cast<unsigned char*>(op->pinned.device);
  const int n = state->nranks, rank = state->rank;
  auto check = [](gpuError_t err, const char* what) {
    if (err == gpuSuccess) return Status::ok();
    (void)gpuGetLastError();
    return gpu::runtimeError(err, what);
  };

  // Stage in: send buffers (and PreMulSum scalars) to pinned memory.
  std::vector<core::CollectiveCall> exchange, gather;
  for (const StagedCall& s : staged) {
    const size_t size = kernels::dataTypeSize(s.call.type);
    if (s.sendBytes > 0) {
      WEFT_TRY(check(gpuMemcpyAsync(host + s.sendAt, s.call.send, s.sendBytes, gpuMemcpyDeviceToHost, stream),
                     "copying sendbuff to staging"));
    }
    core::CollectiveCall h = s.call;
    if (coll::isReducing(s.call.collective)) {
      const size_t blocks = static_cast<size_t>(n) * s.block * size;
      if (blocks > s.sendBytes) std::memset(host + s.sendAt + s.sendBytes, 0, blocks - s.sendBytes);  // padding
      if (s.call.preMulSum && s.call.scalarAt != nullptr) {
        WEFT_TRY(check(gpuMemcpyAsync(host + s.scalarAt, s.call.scalarAt, size, gpuMemcpyDefault, stream),
                       "copying the PreMulSum scalar"));
      } else if (s.call.preMulSum) {
        std::memcpy(host + s.scalarAt, s.call.scalarValue.data(), size);
      }
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
  WEFT_TRY(enqueueHostPhase(op, stream, std::move(exchange)));

  // Reduce each rank's block on the GPU, from and (but for reduce-scatter) into mapped memory.
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
    args.scalar = s.call.preMulSum ? device + s.scalarAt : nullptr;
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
    WEFT_TRY(check(kernels::gpu::launchReduce(args, stream), "launching the reduction kernel"));
  }
  if (!gather.empty()) WEFT_TRY(enqueueHostPhase(op, stream, std::move(gather)));

  // Stage out, then hand the staging memory back once the stream is past it.
  for (const StagedCall& s : staged) {
    if (s.recvBytes == 0 || s.call.collective == Collective::ReduceScatter) continue;
    WEFT_TRY(check(gpuMemcpyAsync(s.call.recv, host + s.resultAt, s.recvBytes, gpuMemcpyHostToDevice, stream),
                   "copying the result from staging to recvbuff"));
  }
  auto* ref = new OperationRef(op);
  if (gpuError_t err = gpuLaunchHostCallback(stream, releaseOperation, ref); err != gpuSuccess) {
    delete ref;
    return check(err, "queueing the release callback");
  }
  return Status::ok();
}

}  // namespace

weftResult_t issueOnDevice(std::shared_ptr<CommState> state, void* stream, const char* fn,
                           std::vector<core::CollectiveCall> calls) {
  Status status = enqueueOnDevice(state, static_cast<gpuStream_t>(stream), fn, calls);
  return reportError(status.withContext(fn), state.get());
}

void releaseDeviceStaging(CommState& state) {
  std::shared_ptr<gpu::StagingPool> pool;
  {
    std::lock_guard<std::mutex> lock(state.stagingMutex);
    pool = std::move(state.staging);
  }
  if (!pool) return;
  ScopedDevice onDevice(pool->device());
  (void)pool->drainAndFree(streamBackstopMs(state.config.timeoutMs));
}

#else  // no GPU runtime: no buffer is ever on a device

weftResult_t issueOnDevice(std::shared_ptr<CommState> state, void*, const char* fn, std::vector<core::CollectiveCall>) {
  return reportError(Status(weftInvalidUsage, std::string(fn) + ": this Weft was built without GPU support"),
                     state.get());
}

void releaseDeviceStaging(CommState&) {}

#endif

}  // namespace weft::api
