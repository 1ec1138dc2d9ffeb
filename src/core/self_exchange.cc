#include "core/self_exchange.h"

#include <cstring>
#include <utility>
#include <vector>

namespace weft::core {

namespace {

using SelfPairs = std::vector<std::pair<const CollectiveCall*, const CollectiveCall*>>;  // send, receive

// The calls' sends to `self` paired with their receives from it, in call order; or why they
// do not pair. Those of no elements move nothing and pair with nothing, as to any other peer.
Result<SelfPairs> pairSelfCalls(std::span<const CollectiveCall> calls, int self) {
  std::vector<const CollectiveCall*> sends, recvs;
  for (const CollectiveCall& call : calls) {
    if (!isPointToPoint(call) || call.root != self || call.count == 0) continue;
    (call.collective == coll::Collective::Send ? sends : recvs).push_back(&call);
  }
  if (sends.size() != recvs.size()) {
    const bool sendsOver = sends.size() > recvs.size();
    return Status(weftInvalidUsage, formatString("%zu send(s) to this rank itself but %zu receive(s) from it: each %s "
                                                 "needs a matching %s in the same group",
                                                 sends.size(), recvs.size(), sendsOver ? "send to self" : "receive from self",
                                                 sendsOver ? "receive" : "send"));
  }
  SelfPairs pairs;
  for (size_t i = 0; i < sends.size(); ++i) {
    if (sends[i]->count != recvs[i]->count || sends[i]->type != recvs[i]->type) {
      return Status(weftInvalidUsage,
                    formatString("send to self of %zu x %s paired with a receive of %zu x %s", sends[i]->count,
                                 kernels::dataTypeName(sends[i]->type), recvs[i]->count,
                                 kernels::dataTypeName(recvs[i]->type)));
    }
    pairs.emplace_back(sends[i], recvs[i]);
  }
  return pairs;
}

}  // namespace

Status checkSelfExchange(std::span<const CollectiveCall> calls, int self) { return pairSelfCalls(calls, self).status(); }

Status copyToSelf(std::span<const CollectiveCall> calls, int self) {
  WEFT_ASSIGN_OR_RETURN(const SelfPairs pairs, pairSelfCalls(calls, self));
  for (const auto& [send, recv] : pairs) {
    if (callBytes(*send) > 0) std::memmove(recv->recv, send->send, callBytes(*send));
  }
  return Status::ok();
}

}  // namespace weft::core
