#include "coll/arena_allreduce.h"

#include <optional>

#include "coll/arena_wait.h"
#include "kernels/cpu/copy_small.h"
#include "kernels/cpu/reduce.h"

namespace weft::coll {

Status arenaAllReduce(transport::ShmArena& arena, uint32_t seq, const ArenaAllReduce& call,
                      const ExecutionContext& context) {
  const size_t bytes = call.count * kernels::dataTypeSize(call.type);
  if (bytes > arena.capacity()) return Status(weftInternalError, "arenaAllReduce: the input exceeds the arena's slot");
  if (call.scale != nullptr) {
    kernels::scale(arena.ownData(seq, bytes), call.send, call.count, call.type, call.scale);
  } else if (call.divideInputs) {
    kernels::divide(arena.ownData(seq, bytes), call.send, call.count, call.type, static_cast<uint64_t>(arena.size()));
  } else {
    kernels::copySmall(arena.ownData(seq, bytes), call.send, bytes);
  }
  arena.publish(seq, static_cast<uint32_t>(bytes), call.tag);

  const int n = arena.size();
  std::optional<Deadline> deadline;
  for (int k = 1; k < n; ++k) {
    const int peer = (arena.rank() + k) % n;
    WEFT_TRY(awaitPublished(arena, peer, seq, context, &deadline));
    WEFT_TRY(checkSameCall(arena, peer, seq, bytes, call.tag, context));
  }
  // Every rank reduces in rank order, so every rank's result is bit-identical.
  const weftRedOp_t op = call.op == weftAvg ? weftSum : call.op;
  kernels::reduce(call.recv, arena.peerData(0, seq, bytes), arena.peerData(1, seq, bytes), call.count, call.type, op);
  for (int r = 2; r < n; ++r) kernels::reduce(call.recv, call.recv, arena.peerData(r, seq, bytes), call.count, call.type, op);
  if (call.op == weftAvg) kernels::divide(call.recv, call.recv, call.count, call.type, static_cast<uint64_t>(n));
  return Status::ok();
}

}  // namespace weft::coll
