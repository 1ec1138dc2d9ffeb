// Host streams and their C API: weftStreamCreate / Destroy / Synchronize / Query.
#include "api/host_stream.h"

#include <algorithm>

#include "api/comm_handle.h"
#include "api/group.h"
#include "api/handle_registry.h"
#include "util/env.h"

namespace weft::api {
namespace {

HandleRegistry<HostStream>& streams() {
  static auto* instance = new HandleRegistry<HostStream>(0x5e000000);  // never destroyed, like comms()
  return *instance;
}

constexpr int kWaitSliceMs = 50;  // how often a waiting operation looks at its abort flag

}  // namespace

weftStream_t registerStream(std::shared_ptr<HostStream> stream) { return streams().add(std::move(stream)); }
std::shared_ptr<HostStream> lookupStream(weftStream_t stream) { return streams().find(stream); }
std::shared_ptr<HostStream> unregisterStream(weftStream_t stream) { return streams().remove(stream); }

Status HostStream::issue(int timeoutMs, const std::function<Status(uint64_t seq)>& enqueue) {
  std::lock_guard<std::mutex> issuing(issueMutex_);
  uint64_t seq;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    longestTimeoutMs_ = std::max(longestTimeoutMs_, timeoutMs);
    seq = ++issued_;
  }
  Status queued = enqueue(seq);
  if (!queued.isOk()) finish(queued);
  return queued;
}

int HostStream::longestTimeoutMs() {
  std::lock_guard<std::mutex> lock(mutex_);
  return longestTimeoutMs_;
}

void HostStream::finish(const Status& status) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++finishedCount_;
  if (!status.isOk() && firstError_.isOk()) firstError_ = status;
  finished_.notify_all();
}

Status HostStream::waitForPredecessors(uint64_t seq, const std::atomic<bool>* abortFlag) {
  std::unique_lock<std::mutex> lock(mutex_);
  // The operations ahead may be on other communicators, each bounded by its own deadline, and
  // together they may rightly take longer than any one: the wait gives up only when none of
  // them has finished for longer than the longest of those deadlines allows.
  const int idleMs = streamBackstopMs(longestTimeoutMs_);
  uint64_t seen = finishedCount_;
  Deadline deadline = Deadline::afterMs(idleMs);
  while (finishedCount_ + 1 < seq) {
    if (abortFlag != nullptr && abortFlag->load()) return Status(weftRemoteError, "the communicator was aborted");
    if (finishedCount_ != seen) {
      seen = finishedCount_;
      deadline = Deadline::afterMs(idleMs);
    }
    if (deadline.expired()) {
      return Status(weftTimeout, formatString("none of the stream's %llu earlier operation(s) still running (on other "
                                              "communicators) finished in %d ms",
                                              static_cast<unsigned long long>(seq - 1 - finishedCount_), idleMs));
    }
    finished_.wait_for(lock, std::chrono::milliseconds(deadline.remainingMs(kWaitSliceMs)));
  }
  return Status::ok();
}

Status HostStream::synchronize(int idleTimeoutMs) {
  std::unique_lock<std::mutex> lock(mutex_);
  while (finishedCount_ != issued_) {
    uint64_t before = finishedCount_;
    finished_.wait_for(lock, std::chrono::milliseconds(idleTimeoutMs), [&] { return finishedCount_ != before; });
    if (finishedCount_ == before) {
      return Status(weftTimeout, formatString("%llu operation(s) made no progress in %d ms",
                                              static_cast<unsigned long long>(issued_ - finishedCount_), idleTimeoutMs));
    }
  }
  return firstError_;
}

Status HostStream::query() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!firstError_.isOk()) return firstError_;
  if (finishedCount_ != issued_) return Status(weftInProgress, "the stream has work in flight");
  return Status::ok();
}

}  // namespace weft::api

using namespace weft;

extern "C" WEFT_API weftResult_t weftStreamCreate(weftStream_t* stream) {
  if (stream == nullptr) return api::reportError(Status(weftInvalidArgument, "weftStreamCreate: stream is NULL"));
  *stream = api::registerStream(std::make_shared<api::HostStream>());
  return weftSuccess;
}

extern "C" WEFT_API weftResult_t weftStreamDestroy(weftStream_t stream) {
  // Work already issued still runs; the stream's state lives until it has.
  if (!api::unregisterStream(stream)) {
    return api::reportError(Status(weftInvalidArgument, "weftStreamDestroy: not a stream made by weftStreamCreate"));
  }
  return weftSuccess;
}

namespace {

// Calls the thread's open group holds for the stream are queued only at weftGroupEnd: waiting
// for the stream, or asking whether it is idle, would answer for work without them.
weftResult_t groupHoldsStreamError(const char* fn) {
  return api::reportError(Status(weftInvalidUsage, std::string(fn) + ": this thread's open group holds calls on the "
                                                   "stream, which are queued only at weftGroupEnd; call it first"));
}

}  // namespace

// NULL, the stream of calls that complete before they return, has nothing outstanding.
extern "C" WEFT_API weftResult_t weftStreamSynchronize(weftStream_t stream) {
  if (stream == nullptr) return weftSuccess;
  auto s = api::lookupStream(stream);
  if (!s) return api::reportError(Status(weftInvalidArgument, "weftStreamSynchronize: not a stream made by weftStreamCreate"));
  if (api::groupHoldsStream(stream)) return groupHoldsStreamError("weftStreamSynchronize");
  auto timeout = defaultTimeoutMs();
  if (!timeout.isOk()) return api::reportError(timeout.status());
  // Each queued operation ends by its communicator's deadline and reports why; this wait is only
  // a backstop, so it outlasts the longest of those deadlines (equal, it raced the operation's
  // own, more precise error: a dead peer surfaced as "timed out" instead of naming the peer).
  const int longest = std::max(timeout.value(), s->longestTimeoutMs());
  return api::reportError(s->synchronize(api::streamBackstopMs(longest)).withContext("weftStreamSynchronize"));
}

extern "C" WEFT_API weftResult_t weftStreamQuery(weftStream_t stream) {
  if (stream == nullptr) return weftSuccess;
  auto s = api::lookupStream(stream);
  if (!s) return api::reportError(Status(weftInvalidArgument, "weftStreamQuery: not a stream made by weftStreamCreate"));
  if (api::groupHoldsStream(stream)) return groupHoldsStreamError("weftStreamQuery");
  Status status = s->query();
  if (status.code() == weftInProgress) return weftInProgress;
  return api::reportError(status.withContext("weftStreamQuery"));
}
