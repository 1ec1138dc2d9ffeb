// How a sender writes large pieces into its shared-memory slots: with plain stores, which leave
// them in the sender's cache, or with streaming stores, which send them to memory. Which is
// cheaper depends on where the two cores sit, and on a virtual machine that changes while a job
// runs. On the 2-core development VM, 64 KiB pieces, per 64 MiB:
//
//   cores          plain: sender writes, receiver reads      streaming: writes, reads
//   on one die     5.4-8.3 ms, 1.0-1.1 ms                     5.2-6.1 ms, 3.0-3.3 ms
//   on two dies    28-30 ms (each line taken back from the     4.4 ms, 2.4-2.6 ms
//                  receiver's cache), 2.9-3.0 ms
//
// (bench/results/2026-11-27-shm-streamed-slots.md). So the sender times its writes of each
// kind, the receiver times its reads of each kind and publishes them in the ring, and the sender
// writes the way whose sum is lower, with an occasional piece the other way to keep both
// readings current. WEFT_SHM_SLOT_STORES=plain|streaming fixes the choice instead.
#pragma once

#include <cstddef>
#include <cstdint>

#include "util/status.h"

namespace weft::transport::shm {

// How a slot's payload was written, in its header, where the piece is timed.
enum class SlotStores : uint32_t {
  Unmeasured = 0,  // not timed (either way), or a remote slot
  Plain = 1,
  Streaming = 2,
};

// The sender's decision for one piece.
struct SlotWrite {
  bool streaming = false;
  bool timed = false;    // both sides time this piece
  bool explores = false;  // it goes the way the sender does not prefer now (and is timed)
  SlotStores header() const {
    return !timed ? SlotStores::Unmeasured : streaming ? SlotStores::Streaming : SlotStores::Plain;
  }
  // The way most pieces go now, for the estimates' weights.
  SlotStores current() const { return streaming != explores ? SlotStores::Streaming : SlotStores::Plain; }
};

// A cost (ns a byte) as the ring's control block carries it, in picoseconds per KiB; 0 stays 0
// (not yet known).
uint32_t encodeSlotCost(double nanosecondsPerByte);
double decodeSlotCost(uint32_t picosecondsPerKiB);

enum class SlotStoresPolicy { Adaptive, Plain, Streaming };

// WEFT_SHM_SLOT_STORES: auto (default), plain or streaming.
Result<SlotStoresPolicy> slotStoresPolicyFromEnv();

// Pieces smaller than this are written with plain stores and not timed: their cost is the
// handover's latency, not bandwidth.
constexpr size_t kSlotStoresMinBytes = 16 * 1024;

// What moving a byte one way or the other has cost lately, in nanoseconds, on one side.
class SlotStoreCosts {
 public:
  // One piece of `bytes` written with `stores` took `nanoseconds` (to write, or to read).
  // `current`: the kind most pieces go by now, whose estimate moves slowly.
  void record(SlotStores stores, size_t bytes, double nanoseconds, SlotStores current);
  // Nanoseconds per byte (0: no reading yet).
  double cost(SlotStores stores) const { return stores == SlotStores::Streaming ? cost_[1] : cost_[0]; }

 private:
  double cost_[2] = {0, 0};  // plain, streaming
};

// The sender's choice for its next piece, from its own write costs and the receiver's reads.
class SlotStoresChooser {
 public:
  explicit SlotStoresChooser(SlotStoresPolicy policy) : policy_(policy) {}
  SlotWrite choose(size_t pieceBytes);
  // Costs changed: `writes` here, `reads` (the receiver's, as it last published them).
  void update(const SlotStoreCosts& writes, double plainReads, double streamingReads);
  SlotStores current() const { return streaming_ ? SlotStores::Streaming : SlotStores::Plain; }
  // A switch to report (kept until taken), for the log.
  bool takeSwitch();

  // One piece in this many goes the other way: both readings every 8 MiB of 64 KiB pieces, at
  // a cost of a few percent where the two differ 5x.
  static constexpr uint32_t kExploreEvery = 128;
  // Of the others, one in this many is timed (with the exploring ones, 9 pieces in 128):
  // timing takes a pass over the piece on the receiver (about a microsecond for 64 KiB, which
  // the reduction would have overlapped).
  static constexpr uint32_t kTimeEvery = 16;

 private:
  SlotStoresPolicy policy_;
  uint32_t counted_ = 0;
  bool streaming_ = false;
  bool switched_ = false;
};

}  // namespace weft::transport::shm
