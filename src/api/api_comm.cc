// Communicator lifecycle: unique ids, init (blocking and not), destroy, abort, queries.
#include <unistd.h>

#include <memory>
#include <mutex>
#include <unordered_map>

#include "api/comm_init.h"
#include "api/device_issue.h"
#include "gpu/device_memory.h"
#include "api/group.h"
#include "core/bootstrap.h"
#include "core/bootstrap_wire.h"
#include "core/launch_env.h"
#include "core/local_rendezvous.h"
#include "transport/socket/interface_select.h"
#include "util/env.h"
#include "util/log.h"

using namespace weft;
using api::CommState;

namespace weft::api {

Status checkConfig(const weftConfig_t* config, core::CommConfig* out) {
  out->blocking = true;  // not inherited by weftCommSplit
  if (config == nullptr) return Status::ok();
  if (config->magic != WEFT_CONFIG_MAGIC || config->size != sizeof(weftConfig_t)) {
    return Status(weftInvalidArgument, "the config was not made with WEFT_CONFIG_INITIALIZER (bad magic or size)");
  }
  if (config->blocking != WEFT_CONFIG_UNDEF_INT) {
    if (config->blocking != 0 && config->blocking != 1) {
      return Status(weftInvalidArgument, formatString("config.blocking must be 0 or 1, got %d", config->blocking));
    }
    out->blocking = config->blocking == 1;
  }
  if (config->timeoutMs != WEFT_CONFIG_UNDEF_INT) {
    if (config->timeoutMs <= 0) {
      return Status(weftInvalidArgument, formatString("config.timeoutMs must be positive, got %d", config->timeoutMs));
    }
    out->timeoutMs = config->timeoutMs;
  }
  return Status::ok();
}

weftResult_t initCommunicator(weftComm_t* comm, const core::UniqueIdContents& id, int nranks, int rank,
                              const core::CommConfig& config, bool runNow, std::string removeWhenReady,
                              int device) {
  auto state = std::make_shared<CommState>();
  state->device = device;
  state->rank = rank;
  state->nranks = nranks;
  state->removeWhenReady = std::move(removeWhenReady);
  state->config = config;
  state->config.device = device;
  auto work = [state, id, nranks, rank, config = state->config]() -> Status {
    auto made = core::Communicator::create(id, nranks, rank, config, &state->abortFlag);
    if (!state->removeWhenReady.empty()) core::withdrawLocalId(state->removeWhenReady);
    Status status = made.isOk() ? Status::ok() : made.status().withContext(formatString("rank %d of %d: init", rank, nranks));
    if (made.isOk()) {
      state->communicator = made.take();
      state->engine.setCpus(state->communicator->progressCpus());
    }
    if (!status.isOk()) api::reportError(status, state.get());
    state->asyncResult.store(status.code(), std::memory_order_release);
    return status;
  };
  if (runNow) {
    Status status = work();
    if (!status.isOk()) {
      *comm = nullptr;
      return status.code();
    }
    *comm = api::registerComm(state);
    return weftSuccess;
  }
  try {
    state->backgroundThread = std::thread([work] { (void)work(); });
  } catch (const std::system_error& e) {
    return api::reportError(Status(weftSystemError, std::string("cannot start the init thread: ") + e.what()));
  }
  *comm = api::registerComm(state);
  return weftInProgress;
}

Result<core::UniqueIdContents> makeUniqueId() {
  WEFT_ASSIGN_OR_RETURN(int timeoutMs, defaultTimeoutMs());
  WEFT_ASSIGN_OR_RETURN(transport::NetworkInterface itf, transport::chooseInterface());
  core::UniqueIdContents contents;
  WEFT_ASSIGN_OR_RETURN(contents.secret, core::newSecret());
  WEFT_TRY(core::startBootstrapRoot(itf.address, contents.secret, timeoutMs, &contents.root));
  WEFT_INFO("unique id: root on %s (%s)", contents.root.toString().c_str(), itf.name.c_str());
  return contents;
}

}  // namespace weft::api

namespace {

// Communicators a weftCommDestroy is releasing (it waits for their work): their handles no
// longer name them, but a watchdog's weftCommAbort must still reach them and end that wait.
class Releasing {
 public:
  // Takes `comm` out of the registry into this set, or (for an abort) aborts it if it is
  // already here. Null when neither holds it.
  std::shared_ptr<api::CommState> take(weftComm_t comm, bool abort) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto state = api::unregisterComm(comm)) {
      states_.emplace(comm, state);
      return state;
    }
    auto it = states_.find(comm);
    if (!abort || it == states_.end()) return nullptr;
    it->second->abortFlag.store(true);
    return it->second;
  }
  void done(weftComm_t comm) {
    std::lock_guard<std::mutex> lock(mutex_);
    states_.erase(comm);
  }

 private:
  std::mutex mutex_;
  std::unordered_map<weftComm_t, std::shared_ptr<api::CommState>> states_;
};

Releasing& releasing() {
  static auto* instance = new Releasing;  // never destroyed, like the registry
  return *instance;
}

// Destroy and abort: stop the init thread if any, wait for an in-flight collective, free.
weftResult_t releaseCommunicator(weftComm_t comm, bool abort, const char* what) {
  if (auto open = api::lookupComm(comm); open && !abort && api::groupHolds(open.get())) {
    return api::reportError(Status(weftInvalidUsage, std::string(what) + ": this thread's open group holds calls on the "
                                                                         "communicator; call weftGroupEnd first"),
                            open.get());
  }
  auto state = releasing().take(comm, abort);
  if (!state) return api::reportError(Status(weftInvalidArgument, std::string(what) + ": invalid communicator"));
  if (state->released.exchange(true)) return weftSuccess;  // a destroy under way frees it; this abort woke it
  struct Done {
    weftComm_t comm;
    ~Done() { releasing().done(comm); }
  } done{comm};
  if (abort || state->asyncResult.load() == weftInProgress) state->abortFlag.store(true);
  api::joinBackground(*state);
  if (!abort && !state->finalized.load()) api::quiesceDevice(*state);  // a finalize did it
  state->engine.shutdown();  // queued work runs out (fast, once aborted); nothing new is accepted
  api::releaseDeviceStaging(*state);
  std::lock_guard lock(state->communicatorMutex);
  state->communicator.reset();
  return weftSuccess;
}

}  // namespace

extern "C" WEFT_API weftResult_t weftGetUniqueId(weftUniqueId* uniqueId) {
  if (uniqueId == nullptr) return api::reportError(Status(weftInvalidArgument, "weftGetUniqueId: uniqueId is NULL"));
  auto contents = api::makeUniqueId();
  if (!contents.isOk()) return api::reportError(contents.status().withContext("weftGetUniqueId"));
  core::encodeUniqueId(contents.value(), uniqueId);
  return weftSuccess;
}

extern "C" WEFT_API weftResult_t weftCommInitRankConfig(weftComm_t* comm, int nranks, weftUniqueId commId, int rank,
                                                        weftConfig_t* config) {
  if (comm == nullptr) return api::reportCallError(Status(weftInvalidArgument, "weftCommInitRank: comm is NULL"));
  *comm = nullptr;
  if (nranks < 1 || nranks > core::kMaxRanks) {
    return api::reportCallError(Status(weftInvalidArgument, formatString("weftCommInitRank: nranks must be in [1, %d], "
                                                                         "got %d", core::kMaxRanks, nranks)));
  }
  if (rank < 0 || rank >= nranks) {
    return api::reportCallError(Status(weftInvalidArgument,
                                       formatString("weftCommInitRank: rank %d is outside [0, %d)", rank, nranks)));
  }
  auto commConfig = core::defaultCommConfig();
  if (!commConfig.isOk()) return api::reportCallError(commConfig.status().withContext("weftCommInitRank"));
  Status checked = api::checkConfig(config, &commConfig.value());
  const bool blocking = commConfig.value().blocking;
  if (!checked.isOk()) return api::reportCallError(checked.withContext("weftCommInitRank"));
  auto id = core::decodeUniqueId(commId);
  if (!id.isOk()) return api::reportCallError(id.status().withContext("weftCommInitRank"));
  if (api::groupIsOpen()) {
    // Started now on a thread of its own; the outermost weftGroupEnd waits for it (a blocking
    // config) or leaves it to be polled (a non-blocking one), as NCCL does.
    weftResult_t rc = api::initCommunicator(comm, id.value(), nranks, rank, commConfig.value(), false, "",
                                            gpu::currentDevice());
    if (rc != weftInProgress) {
      api::failGroup(Status(rc, weftGetLastError(nullptr)));
      return rc;
    }
    api::addInitToGroup(api::lookupComm(*comm), blocking);
    return blocking ? weftSuccess : weftInProgress;
  }
  return api::initCommunicator(comm, id.value(), nranks, rank, commConfig.value(), blocking, "", gpu::currentDevice());
}

extern "C" WEFT_API weftResult_t weftCommInitRank(weftComm_t* comm, int nranks, weftUniqueId commId, int rank) {
  return weftCommInitRankConfig(comm, nranks, commId, rank, nullptr);
}

extern "C" WEFT_API weftResult_t weftCommInitFromEnv(weftComm_t* comm) {
  if (comm == nullptr) return api::reportError(Status(weftInvalidArgument, "weftCommInitFromEnv: comm is NULL"));
  *comm = nullptr;
  auto config = core::defaultCommConfig();
  if (!config.isOk()) return api::reportError(config.status().withContext("weftCommInitFromEnv"));
  auto launch = core::launchFromEnvironment(config.value().timeoutMs);
  if (!launch.isOk()) return api::reportError(launch.status().withContext("weftCommInitFromEnv"));
  const core::LaunchInfo& info = launch.value();
  WEFT_INFO("rank %d of %d from %s, root %s", info.rank, info.nranks, info.launcher.c_str(),
            info.id.root.toString().c_str());
  return api::initCommunicator(comm, info.id, info.nranks, info.rank, config.value(), true, info.idFileToRemove, gpu::currentDevice());
}

extern "C" WEFT_API weftResult_t weftCommFinalize(weftComm_t comm) {
  constexpr const char* fn = "weftCommFinalize";
  auto state = api::lookupComm(comm);
  if (!state) return api::reportError(Status(weftInvalidArgument, std::string(fn) + ": invalid communicator"));
  if (api::groupHolds(state.get())) {
    return api::reportError(Status(weftInvalidUsage, std::string(fn) + ": this thread's open group holds calls on the "
                                                                       "communicator; call weftGroupEnd first"),
                            state.get());
  }
  if (state->asyncResult.load() != weftSuccess || state->abortFlag.load()) {
    return api::reportError(Status(weftInvalidUsage, std::string(fn) + ": the communicator is not ready (initializing, "
                                                                       "failed or aborted)"),
                            state.get());
  }
  if (state->finalized.exchange(true)) {
    return api::reportError(Status(weftInvalidUsage, std::string(fn) + ": the communicator was finalized already"),
                            state.get());
  }
  // Every call issued before this one, on any host stream or device stream, runs out; then the
  // device's peers are met, as destroy would (it skips that after a finalize).
  auto flush = [state] {
    Status drained = state->engine.runBlocking([] { return Status::ok(); });
    if (!drained.isOk()) return drained.withContext("weftCommFinalize");
    api::quiesceDevice(*state);
    const int failed = state->backgroundError.load();
    if (failed == weftSuccess) return Status::ok();
    std::lock_guard<std::mutex> lock(state->lastErrorMutex);
    return Status(static_cast<weftResult_t>(failed),
                  "weftCommFinalize: an operation issued before it failed: " + state->lastError);
  };
  if (state->config.blocking) return api::reportError(flush(), state.get());
  state->finalizeResult.store(weftInProgress);
  std::lock_guard<std::mutex> lock(state->backgroundMutex);
  if (state->backgroundThread.joinable()) state->backgroundThread.join();  // the init's, finished
  try {
    state->backgroundThread = std::thread([state, flush] {
      Status status = flush();
      if (!status.isOk()) api::reportError(status, state.get());
      state->finalizeResult.store(status.code(), std::memory_order_release);
    });
  } catch (const std::system_error& e) {
    state->finalizeResult.store(weftSuccess);
    state->finalized.store(false);
    return api::reportError(Status(weftSystemError, std::string(fn) + ": cannot start its thread: " + e.what()),
                            state.get());
  }
  return weftInProgress;
}

// NULL is no communicator, and releasing none succeeds, as in NCCL: cleanup code may release
// what weftCommSplit's WEFT_SPLIT_NOCOLOR left NULL.
extern "C" WEFT_API weftResult_t weftCommDestroy(weftComm_t comm) {
  if (comm == nullptr) return weftSuccess;
  return releaseCommunicator(comm, false, "weftCommDestroy");
}

extern "C" WEFT_API weftResult_t weftCommAbort(weftComm_t comm) {
  if (comm == nullptr) return weftSuccess;
  return releaseCommunicator(comm, true, "weftCommAbort");
}

extern "C" WEFT_API weftResult_t weftCommGetAsyncError(weftComm_t comm, weftResult_t* asyncError) {
  if (asyncError == nullptr) return api::reportError(Status(weftInvalidArgument, "weftCommGetAsyncError: asyncError is NULL"));
  auto state = api::lookupComm(comm);
  if (!state) return api::reportError(Status(weftInvalidArgument, "weftCommGetAsyncError: invalid communicator"));
  auto init = static_cast<weftResult_t>(state->asyncResult.load(std::memory_order_acquire));
  auto background = static_cast<weftResult_t>(state->backgroundError.load());
  *asyncError = init != weftSuccess         ? init
                : background != weftSuccess ? background
                                            : static_cast<weftResult_t>(state->finalizeResult.load(std::memory_order_acquire));
  return weftSuccess;
}

extern "C" WEFT_API weftResult_t weftCommCount(const weftComm_t comm, int* count) {
  auto state = api::lookupComm(comm);
  if (!state || count == nullptr) {
    return api::reportError(Status(weftInvalidArgument, "weftCommCount: invalid communicator or NULL count"));
  }
  *count = state->nranks;
  return weftSuccess;
}

extern "C" WEFT_API weftResult_t weftCommUserRank(const weftComm_t comm, int* rank) {
  auto state = api::lookupComm(comm);
  if (!state || rank == nullptr) {
    return api::reportError(Status(weftInvalidArgument, "weftCommUserRank: invalid communicator or NULL rank"));
  }
  *rank = state->rank;
  return weftSuccess;
}

extern "C" WEFT_API weftResult_t weftCommCuDevice(const weftComm_t comm, int* device) {
  auto state = api::lookupComm(comm);
  if (!state || device == nullptr) {
    return api::reportError(Status(weftInvalidArgument, "weftCommCuDevice: invalid communicator or NULL device"));
  }
  *device = state->device;
  return weftSuccess;
}
