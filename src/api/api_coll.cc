// Collective entry points: argument checks, then the communicator.
#include <cstdint>
#include <functional>

#include "api/comm_handle.h"
#include "api/host_stream.h"
#include "kernels/cpu/reduce.h"

using namespace weft;

namespace {

// The communicator behind `comm`, if it is usable for a collective; otherwise an error.
Result<std::shared_ptr<api::CommState>> usableComm(weftComm_t comm, const char* fn) {
  auto state = api::lookupComm(comm);
  if (!state) return Status(weftInvalidArgument, std::string(fn) + ": invalid communicator (NULL, destroyed or never created)");
  int async = state->asyncResult.load(std::memory_order_acquire);
  if (async == weftInProgress) {
    return Status(weftInvalidUsage, std::string(fn) + ": the communicator is still initializing (poll weftCommGetAsyncError)");
  }
  if (async != weftSuccess) {
    return Status(static_cast<weftResult_t>(async), std::string(fn) + ": the communicator failed to initialize");
  }
  if (state->abortFlag.load()) return Status(weftInvalidUsage, std::string(fn) + ": the communicator was aborted");
  return state;
}

Status checkBuffers(const char* fn, const void* sendbuff, void* recvbuff, size_t count, weftDataType_t datatype,
                    weftStream_t stream) {
  if (!weft::kernels::isValidDataType(datatype)) {
    return Status(weftInvalidArgument, formatString("%s: invalid datatype %d", fn, static_cast<int>(datatype)));
  }
  if (stream != nullptr && !api::lookupStream(stream)) {
    return Status(weftInvalidArgument,
                  formatString("%s: the stream is neither NULL nor a Weft host stream from weftStreamCreate", fn));
  }
  size_t size = weft::kernels::dataTypeSize(datatype);
  if (count > SIZE_MAX / size) {
    return Status(weftInvalidArgument, formatString("%s: count %zu of %s overflows the address space", fn, count,
                                                    weft::kernels::dataTypeName(datatype)));
  }
  if (count == 0) return Status::ok();
  if (sendbuff == nullptr || recvbuff == nullptr) {
    return Status(weftInvalidArgument, formatString("%s: %s is NULL with count %zu", fn,
                                                    sendbuff == nullptr ? "sendbuff" : "recvbuff", count));
  }
  auto s = reinterpret_cast<uintptr_t>(sendbuff), r = reinterpret_cast<uintptr_t>(recvbuff);
  size_t bytes = count * size;
  if (s != r && s < r + bytes && r < s + bytes) {
    return Status(weftInvalidArgument, formatString("%s: sendbuff and recvbuff overlap without being equal", fn));
  }
  return Status::ok();
}

}  // namespace

namespace weft::api {

// Runs a collective in the communicator's issue order: now, on this thread, for the NULL stream
// (returning its result), or queued on the progress engine for a host stream (returning at once;
// the outcome goes to the stream, and a failure also to weftCommGetAsyncError).
weftResult_t issue(std::shared_ptr<CommState> state, weftStream_t stream, const char* fn,
                   std::function<Status(core::Communicator&)> op) {
  CommState* cs = state.get();
  auto run = [state, fn, op = std::move(op)]() -> Status {
    if (!state->communicator) return Status(weftInvalidUsage, std::string(fn) + ": the communicator was destroyed");
    core::Communicator& c = *state->communicator;
    return op(c).withContext(formatString("%s (rank %d of %d)", fn, c.rank(), c.size()));
  };
  if (stream == nullptr) return reportError(cs->engine.runBlocking(run), cs);

  auto hostStream = lookupStream(stream);
  if (!hostStream) return reportError(Status(weftInvalidArgument, std::string(fn) + ": the stream was destroyed"), cs);
  uint64_t seq = hostStream->reserve();
  int timeoutMs = cs->communicator->timeoutMs();
  Status queued = cs->engine.enqueue([state, hostStream, seq, timeoutMs, run]() {
    Status status = hostStream->waitForPredecessors(seq, Deadline::afterMs(timeoutMs), &state->abortFlag);
    if (status.isOk()) status = run();
    if (!status.isOk()) {
      int expected = weftSuccess;
      state->backgroundError.compare_exchange_strong(expected, status.code());
      reportError(status, state.get());
    }
    hostStream->finish(status);
    return status;
  });
  if (!queued.isOk()) hostStream->finish(queued);
  return reportError(queued, cs);
}

}  // namespace weft::api

extern "C" WEFT_API weftResult_t weftAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                               weftDataType_t datatype, weftRedOp_t op, weftComm_t comm,
                                               weftStream_t stream) {
  constexpr const char* fn = "weftAllReduce";
  auto state = usableComm(comm, fn);
  if (!state.isOk()) return api::reportError(state.status());
  api::CommState* cs = state.value().get();
  Status checked = checkBuffers(fn, sendbuff, recvbuff, count, datatype, stream);
  if (checked.isOk() && (static_cast<int>(op) < 0 || op >= weftNumOps)) {
    checked = Status(weftInvalidArgument, formatString("%s: invalid reduction op %d", fn, static_cast<int>(op)));
  }
  if (!checked.isOk()) return api::reportError(checked, cs);
  return api::issue(state.take(), stream, fn, [=](core::Communicator& c) {
    return c.allReduce(sendbuff, recvbuff, count, datatype, op);
  });
}
