#include "api/group.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "api/buffer_use.h"
#include "api/device_issue.h"
#include "api/issue.h"
#include "core/self_exchange.h"

using namespace weft;

namespace {

struct GroupedCall {
  std::shared_ptr<api::CommState> state;
  weftStream_t stream;
  core::CollectiveCall call;
  bool onDevice;  // device buffers: stream is a GPU stream
};

struct OpenGroup {
  Status firstError;  // of a call that failed inside the group
  std::vector<GroupedCall> calls;
  std::vector<std::shared_ptr<api::CommState>> inits;             // blocking: waited for
  std::vector<std::shared_ptr<api::CommState>> nonBlockingInits;  // left to be polled
};

// `fn` (weftGroupEnd or weftGroupSimulateEnd) failed, as an init in the group did.
weftResult_t initFailed(api::CommState& state, weftResult_t rc, const char* what, const char* fn) {
  std::string why;
  {
    std::lock_guard<std::mutex> lock(state.lastErrorMutex);
    why = state.lastError;
  }
  return api::reportError(Status(rc, formatString("%s: %s in the group failed: %s", fn, what, why.c_str())), &state);
}

weftResult_t destroyedInGroup(const char* fn) {
  return api::reportError(Status(weftInvalidUsage, std::string(fn) + ": a communicator with calls in the group was "
                                                                     "destroyed or aborted before the group ended; "
                                                                     "nothing was issued"));
}

// `result`, unless it is success and a non-blocking init of the group failed (its error) or
// still runs (weftInProgress).
weftResult_t withPendingInits(const OpenGroup& group, weftResult_t result, const char* fn) {
  if (result != weftSuccess) return result;
  for (const auto& state : group.nonBlockingInits) {
    const auto rc = static_cast<weftResult_t>(state->asyncResult.load(std::memory_order_acquire));
    if (rc != weftSuccess && rc != weftInProgress) return initFailed(*state, rc, "a non-blocking init", fn);
    if (rc == weftInProgress) result = weftInProgress;
  }
  return result;
}

thread_local OpenGroup tlsGroup;
// Nesting depth of weftGroupStart. Apart from tlsGroup, whose destructor makes every access
// check that it was set up: this one is read on every call.
thread_local int tlsGroupDepth = 0;

// One communicator's share of a group.
struct CommBatch {
  std::shared_ptr<api::CommState> state;
  weftStream_t stream;
  bool onDevice;
  std::vector<core::CollectiveCall> calls;
  std::shared_ptr<api::HostStream> hostStream;  // stream's, looked up before anything is issued
};

api::CommOp runBatch(std::vector<core::CollectiveCall> calls) {
  return [calls = std::move(calls)](core::Communicator& c) { return c.runGroup(calls); };
}

weftResult_t issueBatch(CommBatch& batch) {
  if (batch.onDevice) return api::issueOnDevice(batch.state, batch.stream, "weftGroupEnd", std::move(batch.calls), true);
  if (batch.hostStream) {  // looked up before anything was issued
    api::CommState* cs = batch.state.get();
    return api::reportError(api::enqueueOnStream(std::move(batch.state), std::move(batch.hostStream), "weftGroupEnd",
                                                 runBatch(std::move(batch.calls)), true),
                            cs);
  }
  return api::issue(batch.state, nullptr, "weftGroupEnd", runBatch(std::move(batch.calls)));
}

// Several communicators with work for the NULL stream: each may wait on its peers, which may be
// other communicators of this very group (one thread driving several ranks), so they run side by
// side on their progress threads while this thread waits for all.
// `result`: the group's result so far (its stream batches'), kept where it is an error.
weftResult_t runConcurrently(std::vector<CommBatch>& batches, weftResult_t result) {
  std::vector<std::pair<std::shared_ptr<api::HostStream>, api::CommState*>> waits;
  // Every communicator that failed keeps its error; the first is the one returned (and the
  // thread's last error).
  auto report = [&result](const Status& status, api::CommState* state) {
    if (status.isOk()) return;
    if (result == weftSuccess) result = api::reportError(status, state);
    else api::reportCommError(status, state);
  };
  for (CommBatch& batch : batches) {
    auto stream = std::make_shared<api::HostStream>();
    Status queued = api::enqueueOnStream(batch.state, stream, "weftGroupEnd", runBatch(std::move(batch.calls)), false);
    if (!queued.isOk()) {
      report(queued, batch.state.get());
      continue;
    }
    waits.emplace_back(std::move(stream), batch.state.get());
  }
  // No backstop here: the batches run on the caller's buffers, so this must not return before
  // they have. Each ends by its own deadline once the work queued ahead of it on its
  // communicator has, each piece of which is bounded by its own (as in ProgressEngine::runQueued).
  for (auto& [stream, state] : waits) {
    Status done = stream->synchronize(std::numeric_limits<int>::max());
    report(done, state);
  }
  return result;
}

}  // namespace

namespace weft::api {

bool groupIsOpen() { return tlsGroupDepth > 0; }

void addToGroup(std::shared_ptr<CommState> state, weftStream_t stream, const core::CollectiveCall& call,
                bool onDevice) {
  tlsGroup.calls.push_back({std::move(state), stream, call, onDevice});
}

void failGroup(const Status& status) {
  if (tlsGroup.firstError.isOk()) tlsGroup.firstError = status;
}

weftResult_t reportCallError(const Status& status, CommState* state) {
  if (!status.isOk() && groupIsOpen()) failGroup(status);
  return reportError(status, state);
}

void addInitToGroup(std::shared_ptr<CommState> state, bool blocking) {
  (blocking ? tlsGroup.inits : tlsGroup.nonBlockingInits).push_back(std::move(state));
}

bool groupHolds(const CommState* state) {
  return std::any_of(tlsGroup.calls.begin(), tlsGroup.calls.end(),
                     [state](const GroupedCall& g) { return g.state.get() == state; });
}

bool groupHoldsStream(weftStream_t stream) {
  return groupIsOpen() && std::any_of(tlsGroup.calls.begin(), tlsGroup.calls.end(),
                                      [stream](const GroupedCall& g) { return g.stream == stream; });
}

}  // namespace weft::api

extern "C" WEFT_API weftResult_t weftGroupStart(void) {
  ++tlsGroupDepth;
  return weftSuccess;
}

namespace {

// weftGroupEnd, or weftGroupSimulateEnd where `simulate` is not NULL: then the outermost level
// checks the group as weftGroupEnd does, prices it and issues nothing.
weftResult_t endGroup(weftSimInfo_t* simulate) {
  const char* fn = simulate ? "weftGroupSimulateEnd" : "weftGroupEnd";
  if (tlsGroupDepth == 0) {
    return api::reportError(
        Status(weftInvalidUsage, formatString("%s: no group is open (weftGroupStart was not called)", fn)));
  }
  if (--tlsGroupDepth > 0) return weftSuccess;
  OpenGroup group = std::move(tlsGroup);
  tlsGroup = OpenGroup{};
  // Inits first: each ends by its own deadline (the rendezvous's timeout) or abort.
  weftResult_t initResult = weftSuccess;
  for (const auto& state : group.inits) {
    api::joinBackground(*state);
    const auto rc = static_cast<weftResult_t>(state->asyncResult.load(std::memory_order_acquire));
    if (initResult == weftSuccess && rc != weftSuccess) initResult = initFailed(*state, rc, "an init", fn);
  }
  if (initResult != weftSuccess) return initResult;
  if (!group.firstError.isOk()) {
    return api::reportError(Status(
        group.firstError.code(),
        std::string(fn) + ": nothing in the group was issued, as a call in it failed: " + group.firstError.message()));
  }
  std::vector<CommBatch> batches;
  std::vector<api::RankedCall> ranked;  // every call, in the order made
  for (GroupedCall& g : group.calls) {
    if (g.state->released.load()) return destroyedInGroup(fn);
    auto it = std::find_if(batches.begin(), batches.end(), [&](const CommBatch& b) { return b.state == g.state; });
    if (it == batches.end()) {
      batches.push_back({g.state, g.stream, g.onDevice, {}});
      it = batches.end() - 1;
    } else if (it->stream != g.stream) {
      return api::reportError(Status(weftInvalidUsage, std::string(fn) + ": calls on one communicator used different "
                                                                         "streams within a group; nothing was issued"),
                              g.state.get());
    } else if (it->onDevice != g.onDevice) {
      return api::reportError(
          Status(weftInvalidUsage, std::string(fn) + ": calls on one communicator mixed device and host "
                                                     "buffers within a group; nothing was issued"),
          g.state.get());
    }
    it->calls.push_back(g.call);
    ranked.push_back({g.call, g.state->rank, g.state->nranks});
  }
  // Sends to self without their receives would fail the communicator once it ran them, and
  // calls that write each other's memory (on any of the group's communicators) would race;
  // refused here, nothing is issued and every communicator stays usable.
  for (const CommBatch& batch : batches) {
    if (Status paired = core::checkSelfExchange(batch.calls, batch.state->rank); !paired.isOk()) {
      return api::reportError(Status(paired.code(), std::string(fn) + ": " + paired.message() + "; nothing was issued"),
                              batch.state.get());
    }
  }
  if (const auto overlap = api::firstWriteOverlap(ranked)) {
    const auto [a, b] = *overlap;
    return api::reportError(
        Status(weftInvalidArgument,
               formatString("%s: call %zu (%s) and call %zu (%s) of the group share memory that one of them "
                            "writes; the group runs them side by side, so use separate buffers (nothing was issued)",
                            fn, a, coll::collectiveName(ranked[a].call.collective), b,
                            coll::collectiveName(ranked[b].call.collective))),
        group.calls[a].state.get());
  }
  // A stream destroyed before the group ended fails it whole, before any batch is issued.
  for (CommBatch& batch : batches) {
    if (batch.stream == nullptr || batch.onDevice) continue;
    batch.hostStream = api::lookupStream(batch.stream);
    if (!batch.hostStream) {
      return api::reportError(
          Status(weftInvalidArgument, std::string(fn) + ": a stream of the group was destroyed; nothing "
                                                        "was issued"),
          batch.state.get());
    }
  }
  if (simulate != nullptr) {  // the communicators run side by side: the slowest one's calls
    double slowest = 0;
    for (const CommBatch& batch : batches) {
      std::lock_guard lock(batch.state->communicatorMutex);  // against an abort on another thread
      if (batch.state->released.load() || !batch.state->communicator) return destroyedInGroup(fn);
      slowest = std::max(slowest, batch.state->communicator->predictedUs(batch.calls));
    }
    simulate->estimatedTime = static_cast<float>(slowest);
    return withPendingInits(group, weftSuccess, fn);
  }
  if (batches.size() == 1) return withPendingInits(group, issueBatch(batches[0]), fn);
  // Several communicators (or none: inits only): queue the stream work (host or GPU) first, then
  // run the rest side by side. The batches on one host stream are one place on it, run side by
  // side: one after another, a rank that listed the communicators in the other order than its
  // peer would wait for the peer's batch queued behind the one it waits in.
  weftResult_t result = weftSuccess;
  auto keep = [&result](weftResult_t r) {
    if (result == weftSuccess) result = r;
  };
  std::vector<CommBatch> blocking;
  std::vector<std::pair<std::shared_ptr<api::HostStream>, std::vector<api::StreamPart>>> onHostStreams;
  for (CommBatch& batch : batches) {
    if (batch.onDevice) {
      keep(issueBatch(batch));
    } else if (batch.stream == nullptr) {
      blocking.push_back(std::move(batch));
    } else {
      auto it = std::find_if(onHostStreams.begin(), onHostStreams.end(),
                             [&](const auto& entry) { return entry.first == batch.hostStream; });
      if (it == onHostStreams.end()) it = onHostStreams.insert(onHostStreams.end(), {batch.hostStream, {}});
      it->second.push_back({batch.state, runBatch(std::move(batch.calls))});
    }
  }
  for (auto& [stream, parts] : onHostStreams) {
    api::CommState* first = parts.front().state.get();
    keep(api::reportError(api::enqueueOnStream(std::move(parts), stream, "weftGroupEnd", true), first));
  }
  return withPendingInits(group, runConcurrently(blocking, result), fn);
}

}  // namespace

extern "C" WEFT_API weftResult_t weftGroupEnd(void) { return endGroup(nullptr); }

extern "C" WEFT_API weftResult_t weftGroupSimulateEnd(weftSimInfo_t* simInfo) {
  // A bad simInfo leaves the group open, as it was: nothing of it is lost.
  if (simInfo == nullptr || simInfo->size != sizeof(weftSimInfo_t) || simInfo->magic != WEFT_SIM_INFO_MAGIC) {
    return api::reportError(Status(weftInvalidArgument,
                                   "weftGroupSimulateEnd: simInfo must be a weftSimInfo_t set "
                                   "from WEFT_SIM_INFO_INITIALIZER (the group stays open)"));
  }
  return endGroup(simInfo);
}
