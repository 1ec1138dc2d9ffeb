// Collective and point-to-point entry points: argument checks, then the communicator (now,
// queued on a host stream, or collected into the thread's open group).
#include <cstdint>
#include <cstring>

#include "api/comm_handle.h"
#include "api/group.h"
#include "api/buffer_use.h"
#include "api/device_issue.h"
#include "api/host_stream.h"
#include "core/self_exchange.h"
#include "gpu/device_memory.h"
#include "kernels/cpu/reduce.h"

using namespace weft;
using coll::Collective;

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
  if (state->finalized.load(std::memory_order_relaxed)) {
    return Status(weftInvalidUsage, std::string(fn) + ": the communicator was finalized (only weftCommDestroy may follow)");
  }
  return state;
}

// Returns which buffers the call uses, once they passed.
Result<api::BufferUse> checkBuffers(const char* fn, const core::CollectiveCall& call, int rank, int nranks) {
  const size_t size = kernels::dataTypeSize(call.type);
  if (call.count > SIZE_MAX / size) {
    return Status(weftInvalidArgument, formatString("%s: count %zu of %s overflows the address space", fn, call.count,
                                                    kernels::dataTypeName(call.type)));
  }
  WEFT_ASSIGN_OR_RETURN(api::BufferUse use, api::bufferUse(fn, call, rank, nranks));
  if (call.count == 0) return use;
  if (use.send && call.send == nullptr) {
    return Status(weftInvalidArgument, formatString("%s: sendbuff is NULL with count %zu", fn, call.count));
  }
  if (use.recv && call.recv == nullptr) {
    return Status(weftInvalidArgument, formatString("%s: recvbuff is NULL with count %zu", fn, call.count));
  }
  if (!use.send || !use.recv) return use;
  auto s = reinterpret_cast<uintptr_t>(call.send), r = reinterpret_cast<uintptr_t>(call.recv);
  const bool overlap = s < r + use.recvBytes && r < s + use.sendBytes;
  const bool inPlace = s == r + static_cast<uintptr_t>(use.inPlaceOffset);
  if (overlap && !inPlace) {
    return Status(weftInvalidArgument,
                  formatString("%s: sendbuff and recvbuff overlap other than in place (%s)", fn, use.inPlaceForm));
  }
  return use;
}

// Resolves `op` for a reducing call: a built-in operator, or a PreMulSum made on this
// communicator for this data type.
Status resolveOp(const char* fn, api::CommState& state, weftRedOp_t op, core::CollectiveCall* call) {
  if (static_cast<int>(op) >= 0 && op < weftNumOps) {
    call->op = op;
    return Status::ok();
  }
  std::lock_guard<std::mutex> lock(state.redOpsMutex);
  const long index = static_cast<long>(op) - weftNumOps;
  if (index < 0 || index >= static_cast<long>(state.redOps.size()) || !state.redOps[static_cast<size_t>(index)].live) {
    return Status(weftInvalidArgument, formatString("%s: invalid reduction op %d (neither built in nor a live "
                                                    "weftRedOpCreatePreMulSum operator of this communicator)",
                                                    fn, static_cast<int>(op)));
  }
  const api::PreMulSumOp& pre = state.redOps[static_cast<size_t>(index)];
  if (pre.type != call->type) {
    return Status(weftInvalidArgument, formatString("%s: reduction op %d was made for %s, not %s", fn, static_cast<int>(op),
                                                    kernels::dataTypeName(pre.type), kernels::dataTypeName(call->type)));
  }
  call->op = weftSum;
  call->preMulSum = true;
  call->scalarValue = pre.value;
  call->scalarAt = pre.at;
  return Status::ok();
}

// Checks a call and issues it (or adds it to the open group).
weftResult_t submit(const char* fn, weftComm_t comm, weftStream_t stream, core::CollectiveCall call,
                    weftRedOp_t op = weftSum) {
  auto state = usableComm(comm, fn);
  if (!state.isOk()) return api::reportCallError(state.status());
  api::CommState& cs = *state.value();
  Status checked;
  // The caller may have passed any int as the type: read it as one (loading an out-of-range
  // enum value is undefined behaviour).
  int rawType;
  std::memcpy(&rawType, &call.type, sizeof rawType);
  if (!kernels::isValidDataType(rawType)) {
    checked = Status(weftInvalidArgument, formatString("%s: invalid datatype %d", fn, rawType));
  } else if (call.root < 0 || call.root >= cs.nranks) {
    checked = Status(weftInvalidArgument, formatString("%s: %s %d is outside [0, %d)", fn, core::isPointToPoint(call) ? "peer" : "root",
                                                       call.root, cs.nranks));
  } else if (coll::isReducing(call.collective)) {
    checked = resolveOp(fn, cs, op, &call);
  }
  bool onDevice = false;
  if (checked.isOk()) {
    auto use = checkBuffers(fn, call, cs.rank, cs.nranks);
    checked = use.status();
    if (checked.isOk()) {
      auto where = api::callIsOnDevice(fn, cs, call, use.value());
      onDevice = where.isOk() && where.value();
      checked = where.status();
      if (checked.isOk() && !onDevice) checked = api::checkHostBuffersMapped(fn, call, use.value());
    }
  }
  int scalarDevice = -1;
  if (checked.isOk() && !onDevice && call.preMulSum && call.scalarAt != nullptr &&
      gpu::isDeviceMemory(call.scalarAt, &scalarDevice)) {
    checked = Status(weftInvalidArgument, formatString("%s: the PreMulSum scalar is in GPU memory but the buffers are "
                                                       "host memory", fn));
  }
  // Device buffers run in a GPU stream's order (NULL: the default stream); host buffers now
  // (NULL) or on a Weft host stream.
  const bool hostStream = stream != nullptr && api::lookupStream(stream) != nullptr;
  // Nothing to move, on a GPU stream (no buffer tells that the call is on the device): a no-op,
  // as in NCCL, in a group or not. Zero-size pieces of an all-to-all-v on the GPU are common.
  if (checked.isOk() && !onDevice && call.count == 0 && stream != nullptr && !hostStream) return weftSuccess;
  if (checked.isOk() && onDevice && hostStream) {
    checked = Status(weftInvalidArgument,
                     formatString("%s: device buffers need a GPU stream (cudaStream_t / hipStream_t), not a Weft "
                                  "host stream", fn));
  } else if (checked.isOk() && !onDevice && stream != nullptr && !hostStream) {
    checked = Status(weftInvalidArgument,
                     formatString("%s: the stream is neither NULL nor a Weft host stream from weftStreamCreate (a GPU "
                                  "stream needs device buffers)", fn));
  }
  // Outside a group a call is a group of one: a send to this rank itself (or a receive from it)
  // has no partner, refused here, as weftGroupEnd refuses it, so the communicator stays usable.
  if (checked.isOk() && core::isPointToPoint(call) && !api::groupIsOpen()) {
    checked = core::checkSelfExchange({&call, 1}, cs.rank).withContext(fn);
  }
  if (!checked.isOk()) return api::reportCallError(checked, &cs);
  if (api::groupIsOpen()) {
    api::addToGroup(state.take(), stream, call, onDevice);
    return weftSuccess;
  }
  if (onDevice) return api::issueOnDevice(state.take(), stream, fn, {call}, false);
  return api::issue(state.take(), stream, fn, [call](core::Communicator& c) { return c.run(call); });
}

core::CollectiveCall makeCall(Collective collective, const void* send, void* recv, size_t count, weftDataType_t type,
                              int root = 0) {
  core::CollectiveCall call;
  call.collective = collective;
  call.send = send;
  call.recv = recv;
  call.count = count;
  call.type = type;
  call.root = root;
  return call;
}

}  // namespace

extern "C" WEFT_API weftResult_t weftAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                               weftDataType_t datatype, weftRedOp_t op, weftComm_t comm,
                                               weftStream_t stream) {
  return submit("weftAllReduce", comm, stream, makeCall(Collective::AllReduce, sendbuff, recvbuff, count, datatype), op);
}

extern "C" WEFT_API weftResult_t weftBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                               weftDataType_t datatype, int root, weftComm_t comm, weftStream_t stream) {
  return submit("weftBroadcast", comm, stream,
                makeCall(Collective::Broadcast, sendbuff, recvbuff, count, datatype, root));
}

extern "C" WEFT_API weftResult_t weftBcast(void* buff, size_t count, weftDataType_t datatype, int root,
                                           weftComm_t comm, weftStream_t stream) {
  return submit("weftBcast", comm, stream, makeCall(Collective::Broadcast, buff, buff, count, datatype, root));
}

extern "C" WEFT_API weftResult_t weftReduce(const void* sendbuff, void* recvbuff, size_t count,
                                            weftDataType_t datatype, weftRedOp_t op, int root, weftComm_t comm,
                                            weftStream_t stream) {
  return submit("weftReduce", comm, stream, makeCall(Collective::Reduce, sendbuff, recvbuff, count, datatype, root),
                op);
}

extern "C" WEFT_API weftResult_t weftAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                               weftDataType_t datatype, weftComm_t comm, weftStream_t stream) {
  return submit("weftAllGather", comm, stream,
                makeCall(Collective::AllGather, sendbuff, recvbuff, sendcount, datatype));
}

extern "C" WEFT_API weftResult_t weftReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                                   weftDataType_t datatype, weftRedOp_t op, weftComm_t comm,
                                                   weftStream_t stream) {
  return submit("weftReduceScatter", comm, stream,
                makeCall(Collective::ReduceScatter, sendbuff, recvbuff, recvcount, datatype), op);
}

extern "C" WEFT_API weftResult_t weftAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                                              weftDataType_t datatype, weftComm_t comm, weftStream_t stream) {
  return submit("weftAlltoAll", comm, stream, makeCall(Collective::AlltoAll, sendbuff, recvbuff, count, datatype));
}

extern "C" WEFT_API weftResult_t weftGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                            weftDataType_t datatype, int root, weftComm_t comm, weftStream_t stream) {
  return submit("weftGather", comm, stream,
                makeCall(Collective::Gather, sendbuff, recvbuff, sendcount, datatype, root));
}

extern "C" WEFT_API weftResult_t weftScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                             weftDataType_t datatype, int root, weftComm_t comm, weftStream_t stream) {
  return submit("weftScatter", comm, stream,
                makeCall(Collective::Scatter, sendbuff, recvbuff, recvcount, datatype, root));
}

extern "C" WEFT_API weftResult_t weftSend(const void* sendbuff, size_t count, weftDataType_t datatype, int peer,
                                          weftComm_t comm, weftStream_t stream) {
  return submit("weftSend", comm, stream, makeCall(Collective::Send, sendbuff, nullptr, count, datatype, peer));
}

extern "C" WEFT_API weftResult_t weftRecv(void* recvbuff, size_t count, weftDataType_t datatype, int peer,
                                          weftComm_t comm, weftStream_t stream) {
  return submit("weftRecv", comm, stream, makeCall(Collective::Recv, nullptr, recvbuff, count, datatype, peer));
}

extern "C" WEFT_API weftResult_t weftBarrier(weftComm_t comm, weftStream_t stream) {
  // A one-byte all-reduce: no rank finishes before every rank's byte has reached it. The bytes
  // live in the operation, which outlives the call on a host stream.
  constexpr const char* fn = "weftBarrier";
  if (api::groupIsOpen()) {
    return api::reportCallError(Status(weftInvalidUsage, "weftBarrier: not allowed inside a group"),
                                api::lookupComm(comm).get());
  }
  auto state = usableComm(comm, fn);
  if (!state.isOk()) return api::reportError(state.status());
  if (stream != nullptr && !api::lookupStream(stream)) {
    return api::reportError(Status(weftInvalidArgument, "weftBarrier: the stream is neither NULL nor a Weft host stream"),
                            state.value().get());
  }
  return api::issue(state.take(), stream, fn, [](core::Communicator& c) { return c.barrier(); });
}
