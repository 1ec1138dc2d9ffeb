// A small all-reduce among the ranks of one host through the shared-memory arena
// (transport/shm/shm_arena.h): each rank copies its input into its own slot and publishes it,
// then reduces every rank's slot, in rank order, straight into its output. It is the one-shot
// algorithm without the executor, the schedule or any message: what is left of a small
// all-reduce's latency is one cache-line transfer per peer.
#pragma once

#include <cstdint>

#include "coll/executor.h"
#include "transport/shm/shm_arena.h"

namespace weft::coll {

// The largest all-reduce a communicator sends through its arena (each rank maps 2 slots of
// this size per rank). The tuner chooses the arena only while it beats the executor.
constexpr size_t kArenaMaxBytes = 16 * 1024;

struct ArenaAllReduce {
  const void* send;
  void* recv;
  size_t count;
  weftDataType_t type;
  weftRedOp_t op;               // Sum, Prod, Max, Min or Avg
  const void* scale = nullptr;  // PreMulSum: each input is multiplied by *scale first
  uint64_t tag;                 // equal on every rank of one call (see transport.h's MessageTag)
  bool divideInputs = false;    // each input is divided by the rank count first (dividesInputs)
};

// `seq`: this call's number among the arena's calls, counted alike on every rank from 1.
// Needs 2+ ranks and count * size <= arena.capacity(). Waits end context.timeoutMs after they
// stop spinning (at most context.spinTime into the call), or at context.deadline if sooner.
Status arenaAllReduce(transport::ShmArena& arena, uint32_t seq, const ArenaAllReduce& call,
                      const ExecutionContext& context);

}  // namespace weft::coll
