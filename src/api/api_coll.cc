// Collective entry points: argument checks, then the communicator.
#include <cstdint>

#include "api/comm_handle.h"
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
  if (stream != nullptr) {
    return Status(weftInvalidArgument, formatString("%s: stream must be NULL (host buffers, blocking call)", fn));
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
  std::lock_guard<std::mutex> lock(cs->operationMutex);
  if (!cs->communicator) return api::reportError(Status(weftInvalidUsage, std::string(fn) + ": the communicator was destroyed"));
  core::Communicator& c = *cs->communicator;
  Status done = c.allReduce(sendbuff, recvbuff, count, datatype, op);
  return api::reportError(done.withContext(formatString("%s (rank %d of %d)", fn, c.rank(), c.size())), cs);
}
