#include "transport/shm/slot_stores.h"

#include <algorithm>

#include "util/env.h"

namespace weft::transport::shm {

Result<SlotStoresPolicy> slotStoresPolicyFromEnv() {
  const auto text = envString("WEFT_SHM_SLOT_STORES");
  if (!text || *text == "auto") return SlotStoresPolicy::Adaptive;
  if (*text == "plain") return SlotStoresPolicy::Plain;
  if (*text == "streaming") return SlotStoresPolicy::Streaming;
  return Status(weftInvalidArgument, "WEFT_SHM_SLOT_STORES=\"" + *text + "\": expected auto, plain or streaming");
}

// A reading moves the current kind's estimate a quarter of the way (most pieces go that way),
// the other kind's half of the way (one piece in SlotStoresChooser::kExploreEvery, so each
// reading must count). A reading over 4x the estimate counts as 4x: a side descheduled
// mid-piece must not flip the choice alone.
void SlotStoreCosts::record(SlotStores stores, size_t bytes, double nanoseconds, SlotStores current) {
  if (stores == SlotStores::Unmeasured || bytes == 0) return;
  double sample = nanoseconds / static_cast<double>(bytes);
  double& cost = cost_[stores == SlotStores::Streaming ? 1 : 0];
  if (cost == 0) {
    cost = sample;
    return;
  }
  sample = std::min(sample, 4 * cost);
  cost += (stores == current ? 1.0 / 4 : 1.0 / 2) * (sample - cost);
}

SlotWrite SlotStoresChooser::choose(size_t pieceBytes) {
  if (pieceBytes < kSlotStoresMinBytes) return {};
  switch (policy_) {
    case SlotStoresPolicy::Plain: return {};
    case SlotStoresPolicy::Streaming: return {true, false};
    case SlotStoresPolicy::Adaptive: break;
  }
  // The first piece already goes the other way, so that both readings come soon.
  const uint32_t n = counted_++;
  const bool explore = n % kExploreEvery == 0;
  return {streaming_ != explore, explore || n % kTimeEvery == kTimeEvery / 2, explore};
}

uint32_t encodeSlotCost(double nanosecondsPerByte) {
  if (!(nanosecondsPerByte > 0)) return 0;
  return static_cast<uint32_t>(std::clamp(nanosecondsPerByte * 1000.0 * 1024.0 + 0.5, 1.0, 4e9));
}

double decodeSlotCost(uint32_t picosecondsPerKiB) { return picosecondsPerKiB / 1000.0 / 1024.0; }

// The choice compares write plus read a byte, this way's (most pieces, so a steady state) with
// the other way's (lone pieces). A lone piece reads low when streamed (its stores drain with
// nothing queued behind them: 0.02 ns a byte against a steady 0.05 on the development VM) and
// high when plain (its lines must first come back from the receiver's cache, where streamed
// pieces left them: 0.06-0.1 against a steady 0.04-0.05). So streaming must look twice as cheap
// to be chosen, and plain merely cheaper. With one rule for both, the sender switched back and
// forth every few hundred pieces on the VM, at up to 1.6x the time of either steady way.
void SlotStoresChooser::update(const SlotStoreCosts& writes, double plainReads, double streamingReads) {
  if (policy_ != SlotStoresPolicy::Adaptive) return;
  const double plainWrites = writes.cost(SlotStores::Plain);
  const double streamingWrites = writes.cost(SlotStores::Streaming);
  if (plainWrites == 0 || streamingWrites == 0 || plainReads == 0 || streamingReads == 0) return;
  const double plain = plainWrites + plainReads;
  const double streaming = streamingWrites + streamingReads;
  const bool switchTo = streaming_ ? plain < streaming : streaming < 0.5 * plain;
  if (!switchTo) return;
  streaming_ = !streaming_;
  switched_ = true;
}

bool SlotStoresChooser::takeSwitch() {
  const bool s = switched_;
  switched_ = false;
  return s;
}

}  // namespace weft::transport::shm
