#include "transport/shm/shm_arena.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>

namespace weft::transport {
namespace {

// Process-shared futexes (not FUTEX_PRIVATE_FLAG): the word lives in a MAP_SHARED segment.
void futexWait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::milliseconds slice) {
  timespec timeout{static_cast<time_t>(slice.count() / 1000), static_cast<long>(slice.count() % 1000) * 1000000};
  (void)::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &timeout, nullptr, 0);
}

void futexWakeAll(std::atomic<uint32_t>* word) {
  (void)::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace

Result<ShmArena> ShmArena::create(const std::string& tag, int rank, int nranks, size_t capacity) {
  if (nranks < 1 || rank < 0 || rank >= nranks || capacity == 0 || capacity > UINT32_MAX) {
    return Status(weftInternalError, "ShmArena::create: bad geometry");
  }
  ShmArena arena;
  arena.rank_ = rank;
  arena.capacity_ = capacity;
  arena.segments_.resize(static_cast<size_t>(nranks));
  WEFT_ASSIGN_OR_RETURN(arena.segments_[static_cast<size_t>(rank)], ShmSegment::create(tag, arena.segmentBytes()));
  return arena;
}

Status ShmArena::attach(int peer, const std::string& name) {
  if (peer < 0 || peer >= size() || peer == rank_) return Status(weftInternalError, "ShmArena::attach: bad peer");
  // Every rank maps it: its creator removes the name once all have (unlinkOwn).
  WEFT_ASSIGN_OR_RETURN(segments_[static_cast<size_t>(peer)],
                        ShmSegment::open(name, segmentBytes(), ShmSegment::Name::Keep));
  return Status::ok();
}

void ShmArena::publish(uint32_t seq, uint32_t bytes, uint64_t tag) {
  SlotHeader* h = header(rank_, seq);
  std::atomic_ref<uint32_t>(h->bytes).store(bytes, std::memory_order_relaxed);  // gaveUp() reads it at any time
  h->tag = tag;
  // Sequentially consistent, pairing with sleepUntilPublished: either a sleeper's count is
  // seen here and it is woken, or the sleeper sees this store before it sleeps.
  h->seq.store(seq, std::memory_order_seq_cst);
  if (waiters(rank_)->load(std::memory_order_seq_cst) != 0) futexWakeAll(&h->seq);
}

namespace {
// What a given-up slot holds as its size: more than any arena call publishes (capacity() is far
// smaller), so no call's slot reads as given up.
constexpr uint32_t kGaveUpBytes = UINT32_MAX;
}  // namespace

void ShmArena::markGaveUp(uint32_t seq) {
  SlotHeader* h = header(rank_, seq);
  if (h->seq.load(std::memory_order_relaxed) != seq) return;
  std::atomic_ref<uint32_t>(h->bytes).store(kGaveUpBytes, std::memory_order_seq_cst);
  // The caller's next stores (to the buffers it now reuses) must not be seen before the mark:
  // a seq_cst store alone does not order later plain stores on weakly ordered CPUs.
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

bool ShmArena::gaveUp(int peer, uint32_t seq) const {
  SlotHeader* h = header(peer, seq);
  return h->seq.load(std::memory_order_seq_cst) == seq &&
         std::atomic_ref<uint32_t>(h->bytes).load(std::memory_order_seq_cst) == kGaveUpBytes;
}

void ShmArena::sleepUntilPublished(int peer, uint32_t seq, std::chrono::milliseconds slice) {
  std::atomic<uint32_t>* count = waiters(peer);
  SlotHeader* h = header(peer, seq);
  count->fetch_add(1, std::memory_order_seq_cst);
  const uint32_t seen = h->seq.load(std::memory_order_seq_cst);
  if (seen != seq) futexWait(&h->seq, seen, slice);
  count->fetch_sub(1, std::memory_order_seq_cst);
}

}  // namespace weft::transport
