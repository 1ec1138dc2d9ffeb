// Waiting for a peer's slot on the shared-memory arena (transport/shm/shm_arena.h), and checking
// that what it published belongs to the same call: shared by the collectives that run on it.
#pragma once

#include <cstdint>
#include <optional>

#include "coll/executor.h"
#include "transport/shm/shm_arena.h"

namespace weft::coll {

// Waits until `peer` has published call `seq`: spins a little, then yields the core between
// looks (ranks that share cores need it to publish) until context.spinTime has passed, then
// sleeps on the slot's futex in slices, checking abort, the deadline and the peer's connection
// between them (and every few thousand yields of a long spin). *deadline is set by the first
// wait that gets past the first look or so (timeoutMs from then, or context.deadline if sooner)
// and kept for the rest of the call. context.connections may be null
// (a caller off the progress engine's thread, which must not touch the connections): peers are
// then named by rank, and a dead one is seen only at the deadline. Where `gaveUpSeq` is given,
// a mark that any peer gave up on that call (ShmArena::markGaveUp) ends the wait with
// checkNoneGaveUp's error, within a sleep slice: that peer's partners stop too, and will not publish.
Status awaitPublished(transport::ShmArena& arena, int peer, uint32_t seq, const ExecutionContext& context,
                      std::optional<Deadline>* deadline, std::optional<uint32_t> gaveUpSeq = std::nullopt);

// The peer's slot of call `seq` holds `bytes` bytes of a call tagged `tag`; else an error that
// names the peer: it is in a different call.
Status checkSameCall(const transport::ShmArena& arena, int peer, uint32_t seq, size_t bytes, uint64_t tag,
                     const ExecutionContext& context);

// An error naming the first peer that gave up on call `seq` (ShmArena::markGaveUp), if any:
// this rank's result may then come from buffers that peer's caller is already reusing.
Status checkNoneGaveUp(const transport::ShmArena& arena, uint32_t seq, const ExecutionContext& context);

}  // namespace weft::coll
