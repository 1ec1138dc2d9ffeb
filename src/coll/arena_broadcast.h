// A broadcast among the ranks of one host through the shared-memory arena
// (transport/shm/shm_arena.h): the root copies the buffer into its own slot, a slot's worth at
// a time, and publishes each piece; every other rank copies it straight out into its buffer.
// One copy per rank, where a chain copies into and out of a connection at every hop.
#pragma once

#include <cstddef>
#include <cstdint>

#include "coll/executor.h"
#include "transport/shm/shm_arena.h"

namespace weft::coll {

struct ArenaBroadcast {
  const void* send;  // the root's data (may equal recv); unused elsewhere
  void* recv;
  size_t bytes;
  int root;
  uint64_t tag;  // equal on every rank of one call (see transport.h's MessageTag)
};

// *seq as for arenaAllGather (coll/arena_allgather.h): each piece is one arena call. Every rank
// publishes each piece, the others with no data: that a rank has published piece s tells the
// root it has read piece s-1, so the root's slot of that parity may be written again. As in every
// arena call, a rank publishes piece s+1 only once it has seen every peer publish s: the
// non-roots wait for each other too, not only for the root.
Status arenaBroadcast(transport::ShmArena& arena, uint32_t* seq, const ArenaBroadcast& call,
                      const ExecutionContext& context);

}  // namespace weft::coll
