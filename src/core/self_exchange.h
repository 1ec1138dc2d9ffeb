// Sends to this rank itself and receives from it: legal only within one group, where the k-th
// send to self pairs with the k-th receive from self, of the same count and type (as a send
// and a receive between two ranks must match), and is a copy.
#pragma once

#include <span>

#include "core/collective_call.h"
#include "util/status.h"

namespace weft::core {

// weftInvalidUsage, saying why, unless `calls` (one group's, on the communicator's rank `self`)
// pair their sends to self and receives from self as above.
Status checkSelfExchange(std::span<const CollectiveCall> calls, int self);

// Checks as checkSelfExchange, then copies each pair's data.
Status copyToSelf(std::span<const CollectiveCall> calls, int self);

}  // namespace weft::core
