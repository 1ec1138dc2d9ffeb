// Host streams: what a weftStream_t made by weftStreamCreate stands for. A stream orders the
// operations issued on it, across communicators: each waits for the one before it on the same
// stream to finish. Its first error is kept and returned by weftStreamSynchronize/Query.
// Handles are looked up in a registry, so an invented or destroyed stream is an error.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>

#include "util/deadline.h"
#include "util/status.h"
#include "weft/weft.h"

namespace weft::api {

class HostStream {
 public:
  // Takes the next place on the stream (1, 2, ...) for an operation that ends by a deadline of
  // timeoutMs, and hands it to `enqueue`, which queues the operation; a failure to queue ends
  // that place at once. Both happen under one lock: threads issuing on one stream must queue
  // on a communicator's worker in the order of their places, or the worker would wait for a
  // place queued behind the one it runs.
  Status issue(int timeoutMs, const std::function<Status(uint64_t seq)>& enqueue);
  // The longest deadline of any operation ever queued here (0: none).
  int longestTimeoutMs();
  // Records that operation `seq` ended with `status`.
  void finish(const Status& status);
  // Waits until the operations before `seq` have finished, or the abort; weftTimeout if none
  // of them finishes for streamBackstopMs(longestTimeoutMs()).
  Status waitForPredecessors(uint64_t seq, const std::atomic<bool>* abortFlag);
  // Waits until everything issued so far has finished (weftTimeout if none finishes for
  // idleTimeoutMs); returns the first error, if any.
  Status synchronize(int idleTimeoutMs);
  // weftSuccess when idle with no error, weftInProgress while work is pending, else the error.
  Status query();

 private:
  std::mutex issueMutex_;  // held while an operation takes its place and is queued
  std::mutex mutex_;
  std::condition_variable finished_;
  uint64_t issued_ = 0;
  uint64_t finishedCount_ = 0;
  int longestTimeoutMs_ = 0;
  Status firstError_;
};

// How long a wait on a stream gives operations that each end by a deadline of timeoutMs: long
// enough that the operation's own (more precise) error arrives first.
inline int streamBackstopMs(int timeoutMs) {
  const int64_t ms = 2 * static_cast<int64_t>(timeoutMs) + 1000;
  return ms > INT32_MAX ? INT32_MAX : static_cast<int>(ms);
}

weftStream_t registerStream(std::shared_ptr<HostStream> stream);
std::shared_ptr<HostStream> lookupStream(weftStream_t stream);
std::shared_ptr<HostStream> unregisterStream(weftStream_t stream);

}  // namespace weft::api
