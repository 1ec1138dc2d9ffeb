#include "coll/arena_wait.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <string>

namespace weft::coll {
namespace {

void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

constexpr int kBusyLooks = 32;  // a microsecond or two of spinning before yielding
constexpr auto kSleepSlice = std::chrono::milliseconds(10);  // so abort, the deadline and a dead peer are seen

std::string describe(const ExecutionContext& context, int peer) {
  return context.connections != nullptr ? context.connections->describe(peer) : formatString("rank %d", peer);
}

Status aborted(const ExecutionContext& context) {
  return Status(weftRemoteError, std::string(context.collective) + ": the communicator was aborted");
}

}  // namespace

Status awaitPublished(transport::ShmArena& arena, int peer, uint32_t seq, const ExecutionContext& context,
                      std::optional<Deadline>* deadline, std::optional<uint32_t> gaveUpSeq) {
  for (int i = 0; i < kBusyLooks; ++i) {
    if (arena.published(peer, seq)) return Status::ok();
    cpuRelax();
  }
  // The deadline starts here rather than at the call: reading the clock for it on every call
  // would cost a small all-reduce 5%. It bounds the spin too, however long WEFT_SPIN_US asks.
  if (!*deadline) *deadline = Deadline::afterMs(context.timeoutMs).earlier(context.deadline);
  auto timedOut = [&] {
    return Status(weftTimeout, formatString("%s: timed out after %d ms waiting for data from %s", context.collective,
                                            context.timeoutMs, describe(context, peer).c_str()));
  };
  // An error where the peer's shared-memory connection has closed (it died or failed) without
  // publishing: a peer may publish, finish its call and exit between one look and the next;
  // what it published stays readable in this rank's mapping.
  auto peerGone = [&]() -> Status {
    if (context.connections == nullptr) return Status::ok();
    WEFT_ASSIGN_OR_RETURN(transport::Connection * connection, context.connections->connection(peer, **deadline));
    Status alive = connection->checkPeerAlive();
    if (alive.isOk() || arena.published(peer, seq)) return Status::ok();
    return alive.withContext(context.collective);
  };
  const auto spinUntil = std::chrono::steady_clock::now() + context.spinTime;
  for (unsigned i = 1;; ++i) {
    if (arena.published(peer, seq)) return Status::ok();
    ::sched_yield();
    if (i % 16 == 0) {
      if (context.abortFlag != nullptr && context.abortFlag->load(std::memory_order_relaxed)) return aborted(context);
      if (gaveUpSeq) WEFT_TRY(checkNoneGaveUp(arena, *gaveUpSeq, context));
      if (std::chrono::steady_clock::now() >= spinUntil) break;
    }
    if (i % 4096 == 0) {  // a spin of milliseconds or more
      if ((*deadline)->expired()) return timedOut();
      WEFT_TRY(peerGone());
    }
  }
  for (;;) {
    if (arena.published(peer, seq)) return Status::ok();
    if (context.abortFlag != nullptr && context.abortFlag->load(std::memory_order_relaxed)) return aborted(context);
    if (gaveUpSeq) WEFT_TRY(checkNoneGaveUp(arena, *gaveUpSeq, context));
    if ((*deadline)->expired()) return timedOut();
    WEFT_TRY(peerGone());
    const auto slice =
        std::min<std::chrono::milliseconds>(kSleepSlice, std::chrono::milliseconds((*deadline)->remainingMs()));
    arena.sleepUntilPublished(peer, seq, slice);
  }
}

Status checkSameCall(const transport::ShmArena& arena, int peer, uint32_t seq, size_t bytes, uint64_t tag,
                     const ExecutionContext& context) {
  const auto& slot = arena.slot(peer, seq);
  const uint32_t slotBytes = arena.slotBytes(peer, seq);
  if (slotBytes == bytes && slot.tag == tag) return Status::ok();
  return Status(weftInvalidUsage,
                formatString("%s: %s is in a different call (%u bytes, signature %016llx; here %zu bytes, "
                             "%016llx): every rank must make the same collective calls in the same order",
                             context.collective, describe(context, peer).c_str(), slotBytes,
                             static_cast<unsigned long long>(slot.tag), bytes, static_cast<unsigned long long>(tag)));
}

Status checkNoneGaveUp(const transport::ShmArena& arena, uint32_t seq, const ExecutionContext& context) {
  for (int peer = 0; peer < arena.size(); ++peer) {
    if (peer == arena.rank() || !arena.gaveUp(peer, seq)) continue;
    return Status(weftRemoteError, formatString("%s: %s gave up on this call (its timeout, or an abort) while this "
                                                "rank could still be using its buffers: the result here is not usable",
                                                context.collective, describe(context, peer).c_str()));
  }
  return Status::ok();
}

}  // namespace weft::coll
