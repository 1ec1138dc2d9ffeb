// An all-gather among the ranks of one host through the shared-memory arena
// (transport/shm/shm_arena.h): each rank copies its block into its own slot, a slot's worth at a
// time, and publishes it; every peer copies it straight out of that slot into its output. A
// block crosses memory n times (into the slot, then out to each peer), where a ring over the
// pairwise connections copies it twice per hop, 2(n-1) times, and it takes no schedule, executor
// or message.
#pragma once

#include <cstddef>
#include <cstdint>

#include "coll/executor.h"
#include "transport/shm/shm_arena.h"

namespace weft::coll {

// The arena's slot size: the piece of a block an all-gather moves per step. Large enough that
// a step's copies dwarf its wait for the peers; small enough that a piece is still in the
// cache when the peers read it.
constexpr size_t kArenaSlotBytes = 512 * 1024;

struct ArenaAllGather {
  const void* send;  // this rank's block; may be its place in recv (in place)
  void* recv;        // nranks blocks, in rank order
  size_t blockBytes;
  uint64_t tag;      // equal on every rank of one call (see transport.h's MessageTag)
};

// *seq: the arena's calls so far, counted alike on every rank; each piece is one arena call, so
// on return it has grown by the pieces this all-gather took. Needs 2+ ranks. Waits end
// context.timeoutMs after the first of them stops spinning, or at context.deadline if sooner.
Status arenaAllGather(transport::ShmArena& arena, uint32_t* seq, const ArenaAllGather& call,
                      const ExecutionContext& context);

}  // namespace weft::coll
