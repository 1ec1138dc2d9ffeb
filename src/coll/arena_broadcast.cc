#include "coll/arena_broadcast.h"

#include <algorithm>
#include <optional>

#include "coll/arena_wait.h"
#include "kernels/cpu/copy_small.h"

namespace weft::coll {

Status arenaBroadcast(transport::ShmArena& arena, uint32_t* seq, const ArenaBroadcast& call,
                      const ExecutionContext& context) {
  const int n = arena.size();
  const bool isRoot = arena.rank() == call.root;
  const auto* in = static_cast<const char*>(call.send);
  auto* out = static_cast<char*>(call.recv);
  std::optional<Deadline> deadline;
  for (size_t offset = 0; offset < call.bytes; offset += arena.capacity()) {
    const size_t piece = std::min(arena.capacity(), call.bytes - offset);
    const uint32_t s = ++*seq;
    if (!isRoot) {
      arena.publish(s, static_cast<uint32_t>(piece), call.tag);  // done with piece s-1
      WEFT_TRY(awaitPublished(arena, call.root, s, context, &deadline));
      WEFT_TRY(checkSameCall(arena, call.root, s, piece, call.tag, context));
      kernels::copySmall(out + offset, arena.peerData(call.root, s, piece), piece);
      // The arena's rule: publish s+1 only once every peer has published s, i.e. has finished
      // reading everything before s, this rank's header of s-1 included (which publishing
      // s+1 overwrites). Seeing the root's s alone does not tell that of the other non-roots.
      for (int k = 1; k < n; ++k) {
        const int peer = (arena.rank() + k) % n;
        if (peer == call.root) continue;
        WEFT_TRY(awaitPublished(arena, peer, s, context, &deadline));
        WEFT_TRY(checkSameCall(arena, peer, s, piece, call.tag, context));  // not in another call
      }
      continue;
    }
    kernels::copySmall(arena.ownData(s, piece), in + offset, piece);
    arena.publish(s, static_cast<uint32_t>(piece), call.tag);
    if (out != in) kernels::copySmall(out + offset, in + offset, piece);  // while the peers read
    // Before the next piece overwrites the slot of piece s-1, every peer must be past it.
    for (int k = 1; k < n; ++k) {
      const int peer = (call.root + k) % n;
      WEFT_TRY(awaitPublished(arena, peer, s, context, &deadline));
      WEFT_TRY(checkSameCall(arena, peer, s, piece, call.tag, context));
    }
  }
  return Status::ok();
}

}  // namespace weft::coll
