// How a shared-memory sender chooses between plain and streaming stores for its slots
// (transport/shm/slot_stores.h): the fixed policies, how often it tries the other way and times
// a piece, the cost estimates, and when the choice switches.
#include <catch2/catch.hpp>

#include <cstdlib>

#include "transport/shm/shm_ring.h"
#include "transport/shm/slot_stores.h"

using namespace weft::transport::shm;

namespace {

constexpr size_t kPiece = 64 * 1024;

// Costs (ns a byte) as both sides would have them: `writes` here, the reads as published.
struct Costs {
  double plainWrite, plainRead, streamingWrite, streamingRead;
};

void feed(SlotStoresChooser& chooser, SlotStoreCosts& writes, const Costs& c) {
  writes.record(SlotStores::Plain, kPiece, c.plainWrite * kPiece, SlotStores::Plain);
  writes.record(SlotStores::Streaming, kPiece, c.streamingWrite * kPiece, SlotStores::Plain);
  chooser.update(writes, c.plainRead, c.streamingRead);
}

}  // namespace

TEST_CASE("slot stores: WEFT_SHM_SLOT_STORES names the policy, and a bad value is an error", "[unit]") {
  ::unsetenv("WEFT_SHM_SLOT_STORES");
  CHECK(slotStoresPolicyFromEnv().value() == SlotStoresPolicy::Adaptive);
  ::setenv("WEFT_SHM_SLOT_STORES", "plain", 1);
  CHECK(slotStoresPolicyFromEnv().value() == SlotStoresPolicy::Plain);
  ::setenv("WEFT_SHM_SLOT_STORES", "streaming", 1);
  CHECK(slotStoresPolicyFromEnv().value() == SlotStoresPolicy::Streaming);
  ::setenv("WEFT_SHM_SLOT_STORES", "fast", 1);
  auto bad = slotStoresPolicyFromEnv();
  REQUIRE_FALSE(bad.isOk());
  CHECK(bad.status().code() == weftInvalidArgument);
  CHECK(bad.status().message().find("WEFT_SHM_SLOT_STORES=\"fast\"") != std::string::npos);
  ::unsetenv("WEFT_SHM_SLOT_STORES");
}

TEST_CASE("slot stores: fixed policies write one way and time nothing, and small pieces go plain", "[unit]") {
  SlotStoresChooser plain(SlotStoresPolicy::Plain), streaming(SlotStoresPolicy::Streaming),
      adaptive(SlotStoresPolicy::Adaptive);
  for (int i = 0; i < 300; ++i) {
    const SlotWrite p = plain.choose(kPiece), s = streaming.choose(kPiece);
    CHECK_FALSE(p.streaming);
    CHECK_FALSE(p.timed);
    CHECK(s.streaming);
    CHECK_FALSE(s.timed);
    const SlotWrite small = adaptive.choose(kSlotStoresMinBytes - 1);
    CHECK_FALSE(small.streaming);
    CHECK(small.header() == SlotStores::Unmeasured);
  }
}

TEST_CASE("slot stores: the adaptive sender tries the other way once in 128 pieces, first at once", "[unit]") {
  SlotStoresChooser chooser(SlotStoresPolicy::Adaptive);
  const SlotWrite first = chooser.choose(kPiece);
  CHECK(first.streaming);  // plain is the default, so the first piece tries streaming
  CHECK(first.explores);
  CHECK(first.header() == SlotStores::Streaming);
  CHECK(first.current() == SlotStores::Plain);
  int other = 1, timed = 1;
  for (uint32_t i = 1; i < 4 * SlotStoresChooser::kExploreEvery; ++i) {
    const SlotWrite w = chooser.choose(kPiece);
    other += w.streaming ? 1 : 0;
    timed += w.timed ? 1 : 0;
    CHECK(w.explores == w.streaming);
    CHECK(w.current() == SlotStores::Plain);
    if (w.streaming) CHECK(w.timed);  // a piece the other way is always timed
  }
  CHECK(other == 4);
  CHECK(timed == 4 + 4 * static_cast<int>(SlotStoresChooser::kExploreEvery / SlotStoresChooser::kTimeEvery));
}

TEST_CASE("slot stores: estimates start at the first reading and move by a quarter or a half", "[unit]") {
  SlotStoreCosts costs;
  CHECK(costs.cost(SlotStores::Plain) == 0);
  costs.record(SlotStores::Plain, 1000, 100, SlotStores::Plain);  // 0.1 ns a byte
  CHECK(costs.cost(SlotStores::Plain) == Approx(0.1));
  costs.record(SlotStores::Plain, 1000, 200, SlotStores::Plain);  // current: a quarter of the way
  CHECK(costs.cost(SlotStores::Plain) == Approx(0.125));
  costs.record(SlotStores::Streaming, 1000, 40, SlotStores::Plain);
  costs.record(SlotStores::Streaming, 1000, 80, SlotStores::Plain);  // the other kind: half of the way
  CHECK(costs.cost(SlotStores::Streaming) == Approx(0.06));
  costs.record(SlotStores::Plain, 1000, 1e9, SlotStores::Plain);  // a descheduled reading counts as 4x
  CHECK(costs.cost(SlotStores::Plain) == Approx(0.125 + (0.5 - 0.125) / 4));
  costs.record(SlotStores::Unmeasured, 1000, 1e9, SlotStores::Plain);
  costs.record(SlotStores::Plain, 0, 1e9, SlotStores::Plain);
  CHECK(costs.cost(SlotStores::Plain) == Approx(0.125 + (0.5 - 0.125) / 4));
}

TEST_CASE("slot stores: streaming must look twice as cheap to be chosen, plain merely cheaper", "[unit]") {
  SlotStoresChooser chooser(SlotStoresPolicy::Adaptive);
  SlotStoreCosts writes;
  chooser.update(writes, 0.03, 0.03);  // no writes timed yet: no choice
  CHECK(chooser.current() == SlotStores::Plain);
  CHECK_FALSE(chooser.takeSwitch());

  // Cores on one die: plain 0.07, a lone streamed piece 0.06. Not enough.
  feed(chooser, writes, {0.05, 0.02, 0.02, 0.04});
  CHECK(chooser.current() == SlotStores::Plain);
  CHECK_FALSE(chooser.takeSwitch());

  // Cores on two dies: plain writes take each line back from the receiver.
  SlotStoresChooser slow(SlotStoresPolicy::Adaptive);
  SlotStoreCosts slowWrites;
  feed(slow, slowWrites, {0.45, 0.03, 0.05, 0.03});
  CHECK(slow.current() == SlotStores::Streaming);
  CHECK(slow.takeSwitch());
  CHECK_FALSE(slow.takeSwitch());  // reported once
  for (int i = 0; i < 200; ++i) CHECK(slow.choose(kPiece).streaming == (i % SlotStoresChooser::kExploreEvery != 0));

  // Back on one die: plain is cheaper again (if not twice), so it comes back.
  SlotStoreCosts fresh;
  feed(slow, fresh, {0.05, 0.02, 0.05, 0.04});
  CHECK(slow.current() == SlotStores::Plain);
  CHECK(slow.takeSwitch());
}

TEST_CASE("slot stores: no switch while either side's reading of either way is missing", "[unit]") {
  SlotStoresChooser chooser(SlotStoresPolicy::Adaptive);
  SlotStoreCosts writes;
  writes.record(SlotStores::Plain, kPiece, 0.45 * kPiece, SlotStores::Plain);
  writes.record(SlotStores::Streaming, kPiece, 0.02 * kPiece, SlotStores::Plain);
  chooser.update(writes, 0, 0.03);  // streaming far cheaper to write, but no plain read yet
  chooser.update(writes, 0.03, 0);
  CHECK(chooser.current() == SlotStores::Plain);
  CHECK_FALSE(chooser.takeSwitch());
  chooser.update(writes, 0.03, 0.03);
  CHECK(chooser.current() == SlotStores::Streaming);
}

TEST_CASE("slot stores: the receiver's costs cross the ring's control block intact", "[unit]") {
  CHECK(encodeSlotCost(0) == 0);
  CHECK(encodeSlotCost(-1) == 0);
  CHECK(decodeSlotCost(0) == 0);
  for (double cost : {0.001, 0.017, 0.045, 0.4, 3.9}) {
    CHECK(decodeSlotCost(encodeSlotCost(cost)) == Approx(cost).epsilon(1e-3));
  }
  CHECK(decodeSlotCost(encodeSlotCost(1e9)) == Approx(4e9 / 1000.0 / 1024.0));  // saturates
  RingControl control{};
  CHECK(control.readCost(SlotStores::Plain) == 0);
  control.publishReadCosts(0.045, 0.031);
  CHECK(control.readCost(SlotStores::Plain) == Approx(0.045).epsilon(1e-3));
  CHECK(control.readCost(SlotStores::Streaming) == Approx(0.031).epsilon(1e-3));
  control.publishReadCosts(0.2, 0);
  CHECK(control.readCost(SlotStores::Streaming) == 0);
}

TEST_CASE("slot stores: a fixed policy never switches", "[unit]") {
  SlotStoresChooser chooser(SlotStoresPolicy::Plain);
  SlotStoreCosts writes;
  feed(chooser, writes, {0.45, 0.03, 0.05, 0.03});
  CHECK(chooser.current() == SlotStores::Plain);
  CHECK_FALSE(chooser.takeSwitch());
}
