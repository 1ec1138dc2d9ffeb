#include "coll/arena_allgather.h"

#include <algorithm>
#include <optional>

#include "coll/arena_wait.h"
#include "kernels/cpu/copy_small.h"

namespace weft::coll {

Status arenaAllGather(transport::ShmArena& arena, uint32_t* seq, const ArenaAllGather& call,
                      const ExecutionContext& context) {
  const int n = arena.size();
  const int me = arena.rank();
  const auto* mine = static_cast<const char*>(call.send);
  auto* recv = static_cast<char*>(call.recv);
  char* myPlace = recv + static_cast<size_t>(me) * call.blockBytes;
  std::optional<Deadline> deadline;
  // A slot is written again two pieces later, once every peer has published the piece in
  // between, which it does only after reading this one (see shm_arena.h).
  for (size_t offset = 0; offset < call.blockBytes; offset += arena.capacity()) {
    const size_t piece = std::min(arena.capacity(), call.blockBytes - offset);
    const uint32_t s = ++*seq;
    kernels::copySmall(arena.ownData(s, piece), mine + offset, piece);
    arena.publish(s, static_cast<uint32_t>(piece), call.tag);
    if (myPlace != mine) kernels::copySmall(myPlace + offset, mine + offset, piece);  // while the peers read
    for (int k = 1; k < n; ++k) {
      const int peer = (me + k) % n;
      WEFT_TRY(awaitPublished(arena, peer, s, context, &deadline));
      WEFT_TRY(checkSameCall(arena, peer, s, piece, call.tag, context));
      kernels::copySmall(recv + static_cast<size_t>(peer) * call.blockBytes + offset, arena.peerData(peer, s, piece),
                         piece);
    }
  }
  return Status::ok();
}

}  // namespace weft::coll
