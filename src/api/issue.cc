#include "api/issue.h"

namespace weft::api {
namespace {

// The operation as it will run, later, on the worker: it holds the communicator's state.
std::function<Status()> bind(std::shared_ptr<CommState> state, const char* fn, CommOp op) {
  return [state = std::move(state), fn, op = std::move(op)]() mutable -> Status { return runOnComm(*state, fn, op); };
}

}  // namespace

Status enqueueOnStream(std::shared_ptr<CommState> state, std::shared_ptr<HostStream> stream, const char* fn,
                       CommOp op, bool recordAsyncError) {
  auto run = bind(state, fn, std::move(op));
  const int timeoutMs = state->config.timeoutMs;  // the communicator may be gone by now
  return stream->issue(timeoutMs, [&](uint64_t seq) {
    return state->engine.enqueue([state, stream, seq, run, recordAsyncError]() {
      Status status = stream->waitForPredecessors(seq, &state->abortFlag);
      if (status.isOk()) {
        status = run();
      } else if (state->communicator) {
        // Not run, where the peers may have run it: this rank's next call would meet the
        // peers' call after it, so the communicator is out of step for good.
        state->communicator->failWith(status);
      }
      if (!status.isOk() && recordAsyncError) {
        int expected = weftSuccess;
        state->backgroundError.compare_exchange_strong(expected, status.code());
        reportError(status, state.get());
      }
      stream->finish(status);
      return status;
    });
  });
}

Status withCallContext(Status status, const char* fn, const core::Communicator& c) {
  return status.withContext(formatString("%s (rank %d of %d)", fn, c.rank(), c.size()));
}

weftResult_t issueOnStream(std::shared_ptr<CommState> state, weftStream_t stream, const char* fn, CommOp op) {
  CommState* cs = state.get();
  auto hostStream = lookupStream(stream);
  if (!hostStream) return reportError(Status(weftInvalidArgument, std::string(fn) + ": the stream was destroyed"), cs);
  return reportError(enqueueOnStream(std::move(state), std::move(hostStream), fn, std::move(op), true), cs);
}

}  // namespace weft::api
