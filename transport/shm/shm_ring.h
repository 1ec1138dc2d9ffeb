// The layout of one direction of a shared-memory connection: a single-producer/single-consumer
// ring of slots in a segment the sender creates. Counters and sleep flags sit on their own cache
// lines. A slot carries either a piece of a message (copied through the ring, which stays in the
// shared cache; a fused receive-and-reduce reads it straight out of the slot) or, when enabled,
// the address of the sender's buffer, which the receiver reads with one process_vm_readv straight
// into its destination.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "transport/shm/slot_stores.h"

namespace weft::transport::shm {

constexpr uint32_t kRingMagic = 0x47525753;  // "SWRG"
constexpr uint32_t kRingVersion = 3;

struct alignas(64) RingControl {
  uint32_t magic;
  uint32_t version;
  uint32_t slots;
  uint32_t slotBytes;
  alignas(64) std::atomic<uint64_t> head;  // slots published by the sender
  alignas(64) std::atomic<uint64_t> tail;  // slots released by the receiver
  // Set by a side before it sleeps in poll(); the other side clears it and rings the doorbell
  // (one byte on the control socket) after it publishes or releases a slot.
  alignas(64) std::atomic<uint32_t> receiverSleeping;
  alignas(64) std::atomic<uint32_t> senderSleeping;
  // Set, for good, by a sender whose call failed while the receiver could still read its
  // buffer through a Remote slot: the caller may be reusing that buffer. The receiver checks
  // it after each remote read (a seqlock's check), so it never keeps bytes written since.
  alignas(64) std::atomic<uint32_t> senderWithdrew;
  // What the receiver's reads of plain and of streamed pieces cost lately, in picoseconds per
  // KiB (0: not yet known), for the sender's choice between them (slot_stores.h).
  alignas(64) std::atomic<uint32_t> readCostPlain;
  std::atomic<uint32_t> readCostStreaming;

  void publishReadCosts(double plain, double streaming) {
    readCostPlain.store(encodeSlotCost(plain), std::memory_order_relaxed);
    readCostStreaming.store(encodeSlotCost(streaming), std::memory_order_relaxed);
  }
  double readCost(SlotStores stores) const {
    const auto& cost = stores == SlotStores::Streaming ? readCostStreaming : readCostPlain;
    return decodeSlotCost(cost.load(std::memory_order_relaxed));
  }
};
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free,
              "cross-process atomics must be lock-free");

enum class SlotKind : uint32_t { Data = 1, Remote = 2 };

struct alignas(64) SlotHeader {
  SlotKind kind;
  uint32_t tag;            // the message's MessageTag
  uint64_t messageBytes;   // the whole message, so the receiver can check it against its post
  uint64_t pieceBytes;     // Data: bytes in this slot's payload; Remote: == messageBytes
  uint64_t remoteAddress;  // Remote: the sender's buffer, in the sender's address space
  SlotStores stores;       // Data: how the payload was written, for the receiver to time
  uint32_t explores;       // Data, timed: 1 where the sender prefers the other way now
};

constexpr size_t slotStride(uint32_t slotBytes) { return sizeof(SlotHeader) + (slotBytes + 63) / 64 * 64; }
constexpr size_t ringBytes(uint32_t slots, uint32_t slotBytes) {
  return sizeof(RingControl) + static_cast<size_t>(slots) * slotStride(slotBytes);
}

// A mapped ring, with the geometry taken from the creator's side (never re-read from shared
// memory, which the peer could change under us).
struct RingView {
  RingControl* control = nullptr;
  char* slots = nullptr;
  uint32_t slotCount = 0;
  uint32_t slotBytes = 0;

  SlotHeader* header(uint64_t index) const {
    return reinterpret_cast<SlotHeader*>(slots + (index % slotCount) * slotStride(slotBytes));
  }
  char* payload(uint64_t index) const { return reinterpret_cast<char*>(header(index)) + sizeof(SlotHeader); }
};

}  // namespace weft::transport::shm
