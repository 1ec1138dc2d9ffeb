#include "api/issue.h"

#include <algorithm>
#include <mutex>

namespace weft::api {
namespace {

// The operation as it will run, later, on the worker: it holds the communicator's state.
std::function<Status()> bind(std::shared_ptr<CommState> state, const char* fn, CommOp op) {
  return [state = std::move(state), fn, op = std::move(op)]() mutable -> Status { return runOnComm(*state, fn, op); };
}

}  // namespace

Status enqueueOnStream(std::vector<StreamPart> parts, std::shared_ptr<HostStream> stream, const char* fn,
                       bool recordAsyncError) {
  if (parts.empty()) return Status(weftInternalError, "enqueueOnStream: nothing to queue");
  int timeoutMs = 0;  // the communicators may be gone by the time the parts run
  for (const StreamPart& part : parts) timeoutMs = std::max(timeoutMs, part.state->config.timeoutMs);
  // The stream's place ends once every part has, with the first error among them.
  struct Join {
    std::mutex mutex;
    size_t left;
    Status first;
  };
  auto join = std::make_shared<Join>();
  join->left = parts.size();
  auto partDone = [join, stream](const Status& status) {
    Status result;
    {
      std::lock_guard<std::mutex> lock(join->mutex);
      if (!status.isOk() && join->first.isOk()) join->first = status;
      if (--join->left > 0) return;
      result = join->first;
    }
    stream->finish(result);
  };
  Status notQueued;
  (void)stream->issue(timeoutMs, [&](uint64_t seq) {
    for (StreamPart& part : parts) {
      const std::shared_ptr<CommState>& state = part.state;
      auto run = bind(state, fn, std::move(part.op));
      Status queued = state->engine.enqueue([state, stream, seq, run, recordAsyncError, partDone]() {
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
        partDone(status);
        return status;
      });
      if (!queued.isOk()) {
        if (notQueued.isOk()) notQueued = queued;
        partDone(queued);
      }
    }
    return Status::ok();  // each part ends the place through partDone, queued or not
  });
  return notQueued;
}

Status enqueueOnStream(std::shared_ptr<CommState> state, std::shared_ptr<HostStream> stream, const char* fn,
                       CommOp op, bool recordAsyncError) {
  std::vector<StreamPart> parts;
  parts.push_back({std::move(state), std::move(op)});
  return enqueueOnStream(std::move(parts), std::move(stream), fn, recordAsyncError);
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
