// Communicators made in bulk or from others: weftCommInitAll and weftCommSplit.
#include <algorithm>
#include <climits>
#include <numeric>
#include <thread>
#include <vector>

#include "api/comm_init.h"
#include "core/bootstrap_wire.h"
#include "gpu/device_memory.h"
#include "api/group.h"
#include "kernels/cpu/reduce.h"

using namespace weft;

extern "C" WEFT_API weftResult_t weftCommInitAll(weftComm_t* comms, int ndev, const int* devlist) {
  constexpr const char* fn = "weftCommInitAll";
  if (comms == nullptr) return api::reportError(Status(weftInvalidArgument, std::string(fn) + ": comms is NULL"));
  if (ndev < 1 || ndev > core::kMaxRanks) {
    return api::reportError(Status(weftInvalidArgument, formatString("%s: ndev must be in [1, %d], got %d", fn,
                                                                     core::kMaxRanks, ndev)));
  }
  std::fill(comms, comms + ndev, nullptr);
  // devlist NULL: every rank uses the caller's current GPU, if any (ranks may share one).
  const int devices = devlist != nullptr ? gpu::deviceCount(true) : 0;
  for (int r = 0; devlist != nullptr && r < ndev; ++r) {
    if (devlist[r] < 0 || devlist[r] >= devices) {
      return api::reportError(Status(weftInvalidArgument, formatString("%s: devlist[%d] = %d is not a GPU of this process "
                                                                       "(it sees %d)", fn, r, devlist[r], devices)));
    }
  }
  const int current = gpu::currentDevice();
  auto config = core::defaultCommConfig();
  if (!config.isOk()) return api::reportError(config.status().withContext(fn));
  auto id = api::makeUniqueId();
  if (!id.isOk()) return api::reportError(id.status().withContext(fn));
  // Init is collective, so every rank needs a thread of its own while it runs.
  std::vector<weftResult_t> results(static_cast<size_t>(ndev), weftSuccess);
  std::vector<std::string> errors(static_cast<size_t>(ndev));
  std::vector<std::thread> threads;
  Status started;
  for (int rank = 0; rank < ndev && started.isOk(); ++rank) {
    auto r = static_cast<size_t>(rank);
    try {
      threads.emplace_back([&, rank, r] {
        results[r] = api::initCommunicator(&comms[r], id.value(), ndev, rank, config.value(), true, "",
                                           devlist != nullptr ? devlist[r] : current);
        if (results[r] != weftSuccess) errors[r] = weftGetLastError(nullptr);
      });
    } catch (const std::system_error& e) {
      // Ranks already started wait for the missing ones until the timeout, then fail.
      started = Status(weftSystemError, formatString("%s: cannot start a thread for rank %d: %s", fn, rank, e.what()));
    }
  }
  for (auto& t : threads) t.join();
  Status failed = started;
  for (int rank = 0; rank < ndev && failed.isOk(); ++rank) {
    auto r = static_cast<size_t>(rank);
    if (results[r] != weftSuccess) failed = Status(results[r], formatString("%s: rank %d: %s", fn, rank, errors[r].c_str()));
  }
  if (failed.isOk()) return weftSuccess;
  for (int rank = 0; rank < ndev; ++rank) {
    if (comms[rank] != nullptr) weftCommAbort(comms[rank]);
    comms[rank] = nullptr;
  }
  return api::reportError(failed);
}

namespace {

// The color a rank whose arguments were rejected sends in round 1, so that the others fail at
// once instead of waiting for it until their timeout.
constexpr int32_t kRejectedColor = INT32_MIN;

// Everyone's (color, key), then the new communicator's members in rank order: by key, then by
// rank in the parent.
std::vector<int> membersOf(const std::vector<int32_t>& colorKey, int color) {
  std::vector<int> members;
  for (size_t r = 0; r < colorKey.size() / 2; ++r) {
    if (colorKey[2 * r] == color) members.push_back(static_cast<int>(r));
  }
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) {
    return colorKey[2 * static_cast<size_t>(a) + 1] < colorKey[2 * static_cast<size_t>(b) + 1];
  });
  return members;
}

}  // namespace

extern "C" WEFT_API weftResult_t weftCommSplit(weftComm_t comm, int color, int key, weftComm_t* newcomm,
                                               weftConfig_t* config) {
  constexpr const char* fn = "weftCommSplit";
  if (newcomm != nullptr) *newcomm = nullptr;
  auto state = api::lookupComm(comm);
  if (!state) return api::reportCallError(Status(weftInvalidArgument, std::string(fn) + ": invalid communicator"));
  if (state->asyncResult.load() != weftSuccess || state->abortFlag.load() || state->finalized.load()) {
    // It cannot take part in the exchange: the others' exchange ends at their timeout.
    return api::reportCallError(
        Status(weftInvalidUsage,
               std::string(fn) + ": the communicator is not ready (initializing, failed, aborted or finalized)"),
        state.get());
  }
  Status checked;
  if (newcomm == nullptr) {  // rejected, but as every rejection here, after taking part below
    checked = Status(weftInvalidArgument, std::string(fn) + ": newcomm is NULL");
  } else if (color < 0 && color != WEFT_SPLIT_NOCOLOR) {
    checked = Status(weftInvalidArgument, formatString("%s: color %d is negative (only WEFT_SPLIT_NOCOLOR may be)", fn, color));
  } else if (api::groupIsOpen()) {
    checked = Status(weftInvalidUsage, std::string(fn) + ": not allowed inside a group");
  }
  core::CommConfig newConfig = state->config;
  if (checked.isOk()) checked = api::checkConfig(config, &newConfig).withContext(fn);
  const int nranks = state->nranks, rank = state->rank;

  // Round 1: every rank's color and key; a rank whose arguments were rejected still takes part.
  std::vector<int32_t> colorKey(2 * static_cast<size_t>(nranks));
  const int32_t mine[2] = {checked.isOk() ? color : kRejectedColor, key};
  weftResult_t r = api::issue(state, nullptr, fn, [&](core::Communicator& c) {
    core::CollectiveCall call{coll::Collective::AllGather, mine, colorKey.data(), 2, weftInt32};
    return c.run(call);
  });
  if (!checked.isOk()) return api::reportCallError(checked, state.get());
  if (r != weftSuccess) return r;
  for (int q = 0; q < nranks; ++q) {
    if (colorKey[2 * static_cast<size_t>(q)] == kRejectedColor) {
      return api::reportError(Status(weftInvalidUsage, formatString("%s: rank %d's arguments were rejected (its error "
                                                                    "says why); no communicator was made", fn, q)),
                              state.get());
    }
  }
  const std::vector<int> members = membersOf(colorKey, color);

  // Round 2: each new communicator's first member makes its id and hands it out. A failure
  // here still takes part in the exchange (an all-zero id), so that no rank waits for it.
  weftUniqueId myId{};
  Status made;
  if (color != WEFT_SPLIT_NOCOLOR && members.front() == rank) {
    auto id = api::makeUniqueId();
    if (id.isOk()) core::encodeUniqueId(id.value(), &myId);
    made = id.status();
  }
  std::vector<weftUniqueId> ids(static_cast<size_t>(nranks));
  r = api::issue(state, nullptr, fn, [&](core::Communicator& c) {
    core::CollectiveCall call{coll::Collective::AllGather, &myId, ids.data(), sizeof(weftUniqueId), weftUint8};
    return c.run(call);
  });
  if (r != weftSuccess) return r;
  if (!made.isOk()) return api::reportError(made.withContext(fn), state.get());
  if (color == WEFT_SPLIT_NOCOLOR) return weftSuccess;

  auto id = core::decodeUniqueId(ids[static_cast<size_t>(members.front())]);
  if (!id.isOk()) {
    return api::reportError(id.status().withContext(formatString("%s: no id from rank %d, the new communicator's first "
                                                                 "member", fn, members.front())),
                            state.get());
  }
  const int newRank = static_cast<int>(std::find(members.begin(), members.end(), rank) - members.begin());
  return api::initCommunicator(newcomm, id.value(), static_cast<int>(members.size()), newRank, newConfig, newConfig.blocking, "", state->device);
}
