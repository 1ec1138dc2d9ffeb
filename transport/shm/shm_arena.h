// Shared slots for small collectives among all ranks of one host (the "arena"): each rank owns
// a segment with two slots, writes its input into the slot of the call's parity and publishes
// the call's sequence number; every peer reads it straight out of the owner's segment. No ring,
// no control messages: a small all-reduce is one store per rank and one cache-line transfer
// per peer, where a ring connection costs a message each way through the executor.
//
// Reuse needs no acknowledgement: a rank writes its slot of parity p again at call s+2 only
// after it has seen every peer's call s+1 published, and a peer publishes s+1 only after it has
// finished reading call s. So every caller of one arena must run the same sequence of arena
// calls (the communicator's issue order guarantees that).
//
// Waiting spins, then sleeps on a futex in the owner's slot header (process-shared), so ranks
// that share cores do not burn each other's time slices.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "transport/shm/shm_segment.h"
#include "util/deadline.h"
#include "util/status.h"

namespace weft::transport {

class ShmArena {
 public:
  // The header of one slot. Data of up to 48 bytes follows it in the same cache line, so it
  // reaches a peer in a single line transfer; larger data starts half a page into the slot
  // (dataOffset).
  struct alignas(16) SlotHeader {
    std::atomic<uint32_t> seq;  // the last call published here (0: none yet)
    uint32_t bytes;             // its input's size
    uint64_t tag;               // a digest of its signature, equal on every rank of one call
  };
  static_assert(sizeof(SlotHeader) == 16 && std::atomic<uint32_t>::is_always_lock_free);

  ShmArena() = default;

  // Creates this rank's segment for `nranks` ranks with slots of `capacity` bytes each.
  static Result<ShmArena> create(const std::string& tag, int rank, int nranks, size_t capacity);

  // The name a peer passes to attach(); valid until unlinkOwn().
  const std::string& ownName() const { return segments_[static_cast<size_t>(rank_)].name(); }
  // Maps a peer's segment (its name from ownName() on that rank), which has the same geometry.
  Status attach(int peer, const std::string& name);
  // Removes this rank's segment name, once every peer has attached.
  void unlinkOwn() { segments_[static_cast<size_t>(rank_)].unlink(); }

  size_t capacity() const { return capacity_; }
  int rank() const { return rank_; }
  int size() const { return static_cast<int>(segments_.size()); }

  // Where the data of a call of `bytes` bytes starts in a slot: in the header's cache line
  // while it fits there, else half a page on. User buffers are mostly page-aligned, and a copy
  // whose destination lies a few bytes past its source's offset within a page runs at half
  // speed or less (its loads wait on stores to the same 4 KiB-aliased addresses).
  static size_t dataOffset(size_t bytes) {
    return bytes <= kLineBytes - sizeof(SlotHeader) ? sizeof(SlotHeader) : kPageBytes / 2;
  }

  // Where this rank's input of `bytes` bytes (at most capacity()) to call `seq` goes; then
  // publish() it.
  void* ownData(uint32_t seq, size_t bytes) { return data(rank_, seq, bytes); }
  void publish(uint32_t seq, uint32_t bytes, uint64_t tag);

  // Whether `peer` has published call `seq`; its input is then at data(peer, seq).
  bool published(int peer, uint32_t seq) const {
    return header(peer, seq)->seq.load(std::memory_order_acquire) == seq;
  }
  const SlotHeader& slot(int peer, uint32_t seq) const { return *header(peer, seq); }
  // The size a peer's slot holds: read atomically, as markGaveUp may be writing it.
  uint32_t slotBytes(int peer, uint32_t seq) const {
    return std::atomic_ref<uint32_t>(header(peer, seq)->bytes).load(std::memory_order_relaxed);
  }
  const void* peerData(int peer, uint32_t seq, size_t bytes) const { return data(peer, seq, bytes); }

  // Marks this rank's slot of call `seq`, published already, as given up: the call failed here
  // (a timeout, an abort) after peers may have started on buffers it named, which its caller
  // may now reuse. Peers check gaveUp() so that none reports success from such buffers.
  void markGaveUp(uint32_t seq);
  // Whether `peer` gave up on call `seq` (markGaveUp).
  bool gaveUp(int peer, uint32_t seq) const;

  // Sleeps until `peer` publishes `seq`, at most `slice` (returns early, spuriously too).
  void sleepUntilPublished(int peer, uint32_t seq, std::chrono::milliseconds slice);

 private:
  static constexpr size_t kLineBytes = 64;
  static constexpr size_t kPageBytes = 4096;
  // A segment: per parity, a slot (header, data at dataOffset), whole pages so that both slots'
  // data have the same offset within a page; then a line of waiter counts.
  size_t slotStride() const { return (kPageBytes / 2 + capacity_ + kPageBytes - 1) / kPageBytes * kPageBytes; }
  SlotHeader* header(int peer, uint32_t seq) const {
    auto* base = static_cast<char*>(segments_[static_cast<size_t>(peer)].data());
    return reinterpret_cast<SlotHeader*>(base + (seq & 1) * slotStride());
  }
  void* data(int peer, uint32_t seq, size_t bytes) const {
    return reinterpret_cast<char*>(header(peer, seq)) + dataOffset(bytes);
  }
  std::atomic<uint32_t>* waiters(int peer) const {
    auto* base = static_cast<char*>(segments_[static_cast<size_t>(peer)].data());
    return reinterpret_cast<std::atomic<uint32_t>*>(base + 2 * slotStride());
  }
  size_t segmentBytes() const { return 2 * slotStride() + kLineBytes; }

  int rank_ = 0;
  size_t capacity_ = 0;
  std::vector<ShmSegment> segments_;  // by rank; this rank's own is created, the others mapped
};

}  // namespace weft::transport
