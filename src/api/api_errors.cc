// Error strings, last-error text and the communicator handle registry.

#include "api/comm_handle.h"
#include "api/handle_registry.h"
#include "util/log.h"

namespace weft::api {
namespace {

thread_local std::string threadLastError;

HandleRegistry<CommState>& comms() {
  static auto* instance = new HandleRegistry<CommState>(0x57000);  // never destroyed: handles may outlive statics
  return *instance;
}

}  // namespace

weftComm_t registerComm(std::shared_ptr<CommState> state) { return static_cast<weftComm_t>(comms().add(std::move(state))); }
std::shared_ptr<CommState> lookupComm(weftComm_t comm) { return comms().find(comm); }
std::shared_ptr<CommState> unregisterComm(weftComm_t comm) { return comms().remove(comm); }

weftResult_t reportError(const Status& status, CommState* state) {
  if (status.isOk()) return weftSuccess;
  threadLastError = status.message();
  return reportCommError(status, state);
}

weftResult_t reportCommError(const Status& status, CommState* state) {
  if (status.isOk()) return weftSuccess;
  if (state != nullptr) {
    std::lock_guard<std::mutex> lock(state->lastErrorMutex);
    state->lastError = status.message();
  }
  WEFT_WARN("%s", status.message().c_str());
  return status.code();
}

}  // namespace weft::api

using namespace weft;

extern "C" WEFT_API const char* weftGetErrorString(weftResult_t result) {
  switch (result) {
    case weftSuccess: return "no error";
    case weftUnhandledCudaError: return "unhandled GPU runtime error";
    case weftSystemError: return "unhandled system error (network, memory, file descriptors)";
    case weftInternalError: return "internal error - please report this issue to the Weft developers";
    case weftInvalidArgument: return "invalid argument";
    case weftInvalidUsage: return "invalid usage (run with WEFT_DEBUG=WARN for details)";
    case weftRemoteError: return "remote process exited or there was a network error";
    case weftInProgress: return "operation in progress";
    case weftTimeout: return "timed out";
    default: return "unknown result code";
  }
}

extern "C" WEFT_API const char* weftGetLastError(weftComm_t comm) {
  if (comm != nullptr) {
    if (auto state = api::lookupComm(comm)) {
      // A copy, made under the lock: a queued operation may rewrite the communicator's text,
      // or another thread destroy it, while the caller still reads this one.
      thread_local std::string copy;
      std::lock_guard<std::mutex> lock(state->lastErrorMutex);
      copy = state->lastError;
      return copy.c_str();
    }
  }
  return api::threadLastError.c_str();
}

extern "C" WEFT_API weftResult_t weftGetVersion(int* version) {
  if (version == nullptr) return api::reportError(Status(weftInvalidArgument, "weftGetVersion: version is NULL"));
  *version = WEFT_VERSION_CODE;
  return weftSuccess;
}
