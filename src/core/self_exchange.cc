#include "core/self_exchange.h"

#include <cstring>
#include <utility>
#include <vector>


namespace weft::core {

namespace {

// The calls' sends to `self` and receives from it, each in call order.
std::pair<std::vector<const CollectiveCall*>, std::vector<const CollectiveCall*>> selfCalls(
    std::span<const CollectiveCall> calls, int self) {
  std::vector<const CollectiveCall*> sends, recvs;
  for (const CollectiveCall& call : calls) {
    if (isPointToPoint(call) && call.root == self) (call.collective == coll::Collective::Send ? sends : recvs).push_back(&call);
  }
  return {std::move(sends), std::move(recvs)};
}

}  // namespace

Status checkSelfExchange(std::span<const CollectiveCall> calls, int self) {
  const auto [sends, recvs] = selfCalls(calls, self);
  if (sends.size() != recvs.size()) {
    return Status(weftInvalidUsage, formatString("%zu send(s) to this rank itself but %zu receive(s) from it: a send "
                                                 "to self needs a matching receive in the same group",
                                                 sends.size(), recvs.size()));
  }
  for (size_t i = 0; i < sends.size(); ++i) {
    if (sends[i]->count != recvs[i]->count || sends[i]->type != recvs[i]->type) {
      return Status(weftInvalidUsage,
                    formatString("send to self of %zu x %s paired with a receive of %zu x %s", sends[i]->count,
                                 kernels::dataTypeName(sends[i]->type), recvs[i]->count,
                                 kernels::dataTypeName(recvs[i]->type)));
    }
  }
  return Status::ok();
}

Status copyToSelf(std::span<const CollectiveCall> calls, int self) {
  WEFT_TRY(checkSelfExchange(calls, self));
  const auto [sends, recvs] = selfCalls(calls, self);
  for (size_t i = 0; i < sends.size(); ++i) {
    if (callBytes(*sends[i]) > 0) std::memmove(recvs[i]->recv, sends[i]->send, callBytes(*sends[i]));
  }
  return Status::ok();
}

}  // namespace weft::core
