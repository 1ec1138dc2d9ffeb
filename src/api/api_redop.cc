// PreMulSum reduction operators (weftRedOpCreatePreMulSum / weftRedOpDestroy).
#include <algorithm>
#include <cstring>

#include "api/comm_handle.h"
#include "kernels/cpu/reduce.h"

using namespace weft;

extern "C" WEFT_API weftResult_t weftRedOpCreatePreMulSum(weftRedOp_t* op, void* scalar, weftDataType_t datatype,
                                                          weftScalarResidence_t residence, weftComm_t comm) {
  constexpr const char* fn = "weftRedOpCreatePreMulSum";
  auto state = api::lookupComm(comm);
  if (!state) return api::reportError(Status(weftInvalidArgument, std::string(fn) + ": invalid communicator"));
  Status checked;
  if (op == nullptr || scalar == nullptr) {
    checked = Status(weftInvalidArgument, formatString("%s: %s is NULL", fn, op == nullptr ? "op" : "scalar"));
  } else if (!kernels::isValidDataType(datatype)) {
    checked = Status(weftInvalidArgument, formatString("%s: invalid datatype %d", fn, static_cast<int>(datatype)));
  } else if (residence != weftScalarHostImmediate && residence != weftScalarDevice) {
    checked = Status(weftInvalidArgument, formatString("%s: invalid scalar residence %d", fn, static_cast<int>(residence)));
  }
  if (!checked.isOk()) return api::reportError(checked, state.get());
  api::PreMulSumOp pre;
  pre.type = datatype;
  if (residence == weftScalarHostImmediate) {
    std::memcpy(pre.value.data(), scalar, kernels::dataTypeSize(datatype));
  } else {
    pre.at = scalar;
  }
  std::lock_guard<std::mutex> lock(state->redOpsMutex);
  // A destroyed operator's slot is taken again, as NCCL does: callers that make one per call
  // (PyTorch's PREMUL_SUM) never run out. Calls copy what they need of the operator when issued.
  auto dead = std::find_if(state->redOps.begin(), state->redOps.end(), [](const api::PreMulSumOp& o) { return !o.live; });
  if (dead != state->redOps.end()) {
    *dead = pre;
    *op = static_cast<weftRedOp_t>(weftNumOps + static_cast<int>(dead - state->redOps.begin()));
    return weftSuccess;
  }
  if (state->redOps.size() >= static_cast<size_t>(weftMaxRedOp - weftNumOps)) {
    return api::reportError(Status(weftInvalidUsage, std::string(fn) + ": too many operators on this communicator"),
                            state.get());
  }
  *op = static_cast<weftRedOp_t>(weftNumOps + static_cast<int>(state->redOps.size()));
  state->redOps.push_back(pre);
  return weftSuccess;
}

extern "C" WEFT_API weftResult_t weftRedOpDestroy(weftRedOp_t op, weftComm_t comm) {
  constexpr const char* fn = "weftRedOpDestroy";
  auto state = api::lookupComm(comm);
  if (!state) return api::reportError(Status(weftInvalidArgument, std::string(fn) + ": invalid communicator"));
  std::lock_guard<std::mutex> lock(state->redOpsMutex);
  const long index = static_cast<long>(op) - weftNumOps;
  if (index < 0 || index >= static_cast<long>(state->redOps.size()) || !state->redOps[static_cast<size_t>(index)].live) {
    return api::reportError(Status(weftInvalidArgument, formatString("%s: op %d is not a live operator made by "
                                                                     "weftRedOpCreatePreMulSum on this communicator",
                                                                     fn, static_cast<int>(op))),
                            state.get());
  }
  // Calls already made copied what they need, so the slot can go now.
  state->redOps[static_cast<size_t>(index)].live = false;
  return weftSuccess;
}
