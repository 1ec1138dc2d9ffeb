#include "coll/arena_allreduce.h"

#include <sched.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "kernels/cpu/reduce.h"

namespace weft::coll {
namespace {

void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

constexpr int kBusyLooks = 32;  // a microsecond or two of spinning before yielding
constexpr auto kSleepSlice = std::chrono::milliseconds(10);  // so abort, the deadline and a dead peer are seen

Status aborted(const ExecutionContext& context) {
  return Status(weftRemoteError, std::string(context.collective) + ": the communicator was aborted");
}

// Waits until `peer` has published call `seq`: spins a little, then yields the core between
// looks (ranks that share cores need it to publish) until context.spinTime has passed, then
// sleeps on the slot's futex in slices, checking abort, the deadline (timeoutMs from the first
// wait that got this far, or context.deadline if sooner) and the peer's connection between them.
Status awaitPeer(transport::ShmArena& arena, int peer, uint32_t seq, const ExecutionContext& context,
                 std::optional<Deadline>* deadline) {
  for (int i = 0; i < kBusyLooks; ++i) {
    if (arena.published(peer, seq)) return Status::ok();
    cpuRelax();
  }
  const auto spinUntil = std::chrono::steady_clock::now() + context.spinTime;
  for (unsigned i = 1;; ++i) {
    if (arena.published(peer, seq)) return Status::ok();
    ::sched_yield();
    if (i % 16 == 0) {
      if (context.abortFlag != nullptr && context.abortFlag->load(std::memory_order_relaxed)) return aborted(context);
      if (std::chrono::steady_clock::now() >= spinUntil) break;
    }
  }
  // The deadline starts here rather than at the call: reading the clock for it on every call
  // would cost a small all-reduce 5%, and the spin before this is bounded.
  if (!*deadline) *deadline = Deadline::afterMs(context.timeoutMs).earlier(context.deadline);
  for (;;) {
    if (arena.published(peer, seq)) return Status::ok();
    if (context.abortFlag != nullptr && context.abortFlag->load(std::memory_order_relaxed)) return aborted(context);
    if ((*deadline)->expired()) {
      return Status(weftRemoteError, formatString("%s: timed out after %d ms waiting for data from %s",
                                                  context.collective, context.timeoutMs,
                                                  context.connections->describe(peer).c_str()));
    }
    WEFT_ASSIGN_OR_RETURN(transport::Connection * connection, context.connections->connection(peer, **deadline));
    WEFT_TRY(connection->checkPeerAlive().withContext(context.collective));
    const auto slice =
        std::min<std::chrono::milliseconds>(kSleepSlice, std::chrono::milliseconds((*deadline)->remainingMs()));
    arena.sleepUntilPublished(peer, seq, slice);
  }
}

}  // namespace

Status arenaAllReduce(transport::ShmArena& arena, uint32_t seq, const ArenaAllReduce& call,
                      const ExecutionContext& context) {
  const size_t bytes = call.count * kernels::dataTypeSize(call.type);
  if (bytes > arena.capacity()) return Status(weftInternalError, "arenaAllReduce: the input exceeds the arena's slot");
  if (call.scale != nullptr) {
    kernels::scale(arena.ownData(seq), call.send, call.count, call.type, call.scale);
  } else {
    std::memcpy(arena.ownData(seq), call.send, bytes);
  }
  arena.publish(seq, static_cast<uint32_t>(bytes), call.tag);

  const int n = arena.size();
  std::optional<Deadline> deadline;
  for (int k = 1; k < n; ++k) {
    const int peer = (arena.rank() + k) % n;
    WEFT_TRY(awaitPeer(arena, peer, seq, context, &deadline));
    const auto& slot = arena.slot(peer, seq);
    if (slot.bytes != bytes || slot.tag != call.tag) {
      return Status(weftInvalidUsage,
                    formatString("%s: %s is in a different call (%u bytes, signature %016llx; here %zu bytes, "
                                 "%016llx): every rank must make the same collective calls in the same order",
                                 context.collective, context.connections->describe(peer).c_str(), slot.bytes,
                                 static_cast<unsigned long long>(slot.tag), bytes,
                                 static_cast<unsigned long long>(call.tag)));
    }
  }
  // Every rank reduces in rank order, so every rank's result is bit-identical.
  const weftRedOp_t op = call.op == weftAvg ? weftSum : call.op;
  kernels::reduce(call.recv, arena.peerData(0, seq), arena.peerData(1, seq), call.count, call.type, op);
  for (int r = 2; r < n; ++r) kernels::reduce(call.recv, call.recv, arena.peerData(r, seq), call.count, call.type, op);
  if (call.op == weftAvg) kernels::divide(call.recv, call.recv, call.count, call.type, static_cast<uint64_t>(n));
  return Status::ok();
}

}  // namespace weft::coll
