// What a weftComm_t stands for: a registry entry that the API layer looks up on every call.
// Handles are never reused, so a destroyed or invented handle is an error, not a crash, and a
// call holds a reference so that an abort from another thread cannot free the state under it.
// Collectives run through the progress engine, which destroy and abort shut down first.
#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/communicator.h"
#include "core/progress_engine.h"
#include "util/status.h"

namespace weft::gpu {
class StagingPool;
}

namespace weft::api {

struct DeviceIpc;  // device_ipc_allreduce.h

// An operator made by weftRedOpCreatePreMulSum; its weftRedOp_t is weftNumOps + its index.
struct PreMulSumOp {
  bool live = true;
  weftDataType_t type;
  std::array<unsigned char, 8> value{};  // weftScalarHostImmediate
  const void* at = nullptr;              // weftScalarDevice: read when a collective runs
};

struct CommState {
  std::atomic<bool> abortFlag{false};
  std::atomic<bool> released{false};  // destroyed or aborted: its handle no longer names it
  std::atomic<int> asyncResult{weftInProgress};  // weftResult_t; InProgress while init runs
  std::atomic<int> backgroundError{weftSuccess};     // first failure of a queued operation
  std::atomic<bool> finalized{false};                // weftCommFinalize: no new calls
  std::atomic<int> finalizeResult{weftSuccess};      // weftInProgress while a non-blocking finalize flushes
  std::unique_ptr<core::Communicator> communicator;  // set once init succeeded
  // Held where it is freed, and where a thread reads it outside the engine while another may
  // free it (weftGroupSimulateEnd's prices, against a watchdog's weftCommAbort).
  std::mutex communicatorMutex;
  core::ProgressEngine engine;                       // runs the collectives in issue order
  std::thread backgroundThread;  // a non-blocking init or finalize; joined through joinBackground
  std::mutex backgroundMutex;
  std::string removeWhenReady;                       // local rendezvous file (rank 0)
  std::mutex redOpsMutex;
  std::vector<PreMulSumOp> redOps;
  std::mutex lastErrorMutex;
  std::string lastError;
  int rank = -1;
  int nranks = 0;
  core::CommConfig config;  // what init was given (weftCommSplit inherits it)
  int device = -1;          // the GPU current at init (-1: none); device buffers must be on it
  std::mutex stagingMutex;
  std::shared_ptr<gpu::StagingPool> staging;  // pinned memory for device buffers, made on first use
  std::shared_ptr<DeviceIpc> ipc;             // GPU-to-GPU buffers, set up by the first use
};

// Waits for a non-blocking init or finalize to end. weftGroupEnd and destroy/abort (from a
// watchdog thread, say) may both wait: one joins, the other waits for that.
inline void joinBackground(CommState& state) {
  std::lock_guard<std::mutex> lock(state.backgroundMutex);
  if (state.backgroundThread.joinable()) state.backgroundThread.join();
}

weftComm_t registerComm(std::shared_ptr<CommState> state);
std::shared_ptr<CommState> lookupComm(weftComm_t comm);
std::shared_ptr<CommState> unregisterComm(weftComm_t comm);

// Records the error as the thread's (and the communicator's, when given) last error and
// returns its code. Logs at WARN.
weftResult_t reportError(const Status& status, CommState* state = nullptr);
// The same, but leaves the thread's last error alone: for a call that returns an earlier error
// (a group's first) while later communicators of it failed too, each keeping its own text.
weftResult_t reportCommError(const Status& status, CommState* state);

using CommOp = std::function<Status(core::Communicator&)>;

// The context a failed call's status gets: "fn (rank r of n)".
Status withCallContext(Status status, const char* fn, const core::Communicator& c);

// Runs `op` on the communicator; a failure's message names the call and the rank.
template <typename Op>
Status runOnComm(CommState& state, const char* fn, Op& op) {
  if (!state.communicator) return Status(weftInvalidUsage, std::string(fn) + ": the communicator was destroyed");
  Status status;
  try {  // no exception crosses the C boundary: a schedule too large for memory is an error
    status = op(*state.communicator);
  } catch (const std::bad_alloc&) {
    status = Status(weftSystemError, "out of memory for the call's schedule or scratch buffers");
    state.communicator->failWith(status);  // peers may be mid-call with this rank
  } catch (const std::exception& e) {
    status = Status(weftInternalError, std::string("unexpected exception: ") + e.what());
    state.communicator->failWith(status);
  }
  // Formatted only on failure: this runs on every call's latency path.
  if (status.isOk()) return status;
  if (state.communicator->failed()) {  // broken for good: weftCommGetAsyncError says so too
    int expected = weftSuccess;
    state.backgroundError.compare_exchange_strong(expected, status.code());
  }
  return withCallContext(std::move(status), fn, *state.communicator);
}

// Queues `op` on a host stream (returning at once); see issue.h.
weftResult_t issueOnStream(std::shared_ptr<CommState> state, weftStream_t stream, const char* fn, CommOp op);

// Runs `op` in the communicator's issue order: now, on this thread, for the NULL stream
// (returning its result), or queued for a host stream (returning at once). The NULL stream's
// path allocates nothing: it is every blocking call's latency.
template <typename Op>
weftResult_t issue(std::shared_ptr<CommState> state, weftStream_t stream, const char* fn, Op&& op) {
  if (stream != nullptr) return issueOnStream(std::move(state), stream, fn, CommOp(std::forward<Op>(op)));
  CommState* cs = state.get();
  return reportError(cs->engine.runBlocking([cs, fn, &op] { return runOnComm(*cs, fn, op); }), cs);
}

}  // namespace weft::api
