// WEFT_TUNE=measure: the communicator times its own all-reduces at init and fits the cost model
// to them (coll/cost_fit.h), so that the tuner prices algorithms by this machine as it is now
// rather than by the defaults' small VMs.
#include <algorithm>
#include <array>
#include <chrono>
#include <vector>

#include "coll/cost_fit.h"
#include "core/communicator.h"
#include "util/log.h"

namespace weft::core {

// Out-of-place all-reduces of float32, each timed as weft-perf times one (the mean over
// back-to-back calls after a warm-up; the median of three such runs, so that one descheduling
// or page fault does not decide it): the ring small, in the L2, in the cache and beyond it as
// coll::fitTimingBytes sizes them; where the arena serves small all-reduces, the one-shot
// through it at 8 bytes and at its largest; where more than 2 ranks share CPUs, the tree at
// 1 KiB. A part not timed keeps its price (coll/cost_fit.h). Rank 0's fit goes to every rank,
// so that all choose alike, and the choices made while algorithms were forced are forgotten.
Status Communicator::measureLinks() {
  if (size() < 2) return Status::ok();  // nothing to time, nothing to choose
  const coll::FitTimingBytes sizes = coll::fitTimingBytes(link_, layout_);
  std::vector<float> send(std::max(sizes.largest / sizeof(float), static_cast<size_t>(size())), 1.0f);
  std::vector<float> recv(send.size());

  const coll::TuningConfig saved = tuning_;
  timingLinks_ = true;
  auto time = [&](coll::Algorithm algorithm, size_t bytes, int warmUps, int iterations, coll::Timing* timing) -> Status {
    tuning_.forced[static_cast<size_t>(coll::Collective::AllReduce)] = algorithm;
    const CollectiveCall call{coll::Collective::AllReduce, send.data(), recv.data(),
                              std::max(bytes / sizeof(float), size_t{1}), weftFloat32, weftSum};
    for (int i = 0; i < warmUps; ++i) WEFT_TRY(run(call));
    std::array<double, 3> means{};
    for (double& mean : means) {
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iterations; ++i) WEFT_TRY(run(call));
      mean = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / iterations;
    }
    std::sort(means.begin(), means.end());
    *timing = {call.count * sizeof(float), means[1]};
    return Status::ok();
  };
  using coll::Algorithm;
  coll::MeasuredAllReduce measured;
  Status status = time(Algorithm::Ring, 1024, 20, 100, &measured.ringSmall);
  if (status.isOk() && sizes.inL2 > 0) status = time(Algorithm::Ring, sizes.inL2, 5, 20, &measured.ringPrivate);
  if (status.isOk() && sizes.inCache > 0) status = time(Algorithm::Ring, sizes.inCache, 5, 20, &measured.ringCached);
  if (status.isOk() && sizes.beyondCache > 0) {
    status = time(Algorithm::Ring, sizes.beyondCache, 2, 3, &measured.ringMemory);
  }
  if (status.isOk() && layout_.arenaBytes > 0) {
    status = time(Algorithm::OneShot, 8, 20, 100, &measured.arenaSmall);
    if (status.isOk()) status = time(Algorithm::OneShot, layout_.arenaBytes, 20, 100, &measured.arenaLarge);
  }
  if (status.isOk() && coll::fitsTreeCrowding(layout_)) {
    status = time(Algorithm::Tree, 1024, 20, 100, &measured.treeSmall);
  }
  tuning_ = saved;
  timingLinks_ = false;
  forgetChoices();
  WEFT_TRY(status);

  const coll::FittedCosts fitted = coll::fitAllReduce(link_, layout_, tuning_.pipeline.chunkBytes, measured);
  double shared[] = {fitted.link.alphaUs,       fitted.link.betaUsPerB,   fitted.link.gammaUsPerB,
                     fitted.link.inCacheFactor, fitted.arena.alphaUs,    fitted.arena.betaUsPerB,
                     fitted.treeHopCrowding,    fitted.link.inPrivateCacheFactor};
  WEFT_TRY(run(CollectiveCall{coll::Collective::Broadcast, shared, shared, std::size(shared), weftFloat64}));
  forgetChoices();
  link_ = {shared[0], shared[1], shared[2], shared[3], shared[7]};
  layout_.arenaLink.alphaUs = shared[4];
  layout_.arenaLink.betaUsPerB = shared[5];
  layout_.treeHopCrowding = shared[6];
  if (rank() == 0) {
    WEFT_INFO("timed at init: ring all-reduce of %zu B in %.1f us, %zu B in %.1f us, %zu B in %.1f us, %zu B in %.1f us; "
              "arena one-shot of %zu B in %.2f us, %zu B in %.2f us; tree of %zu B in %.1f us",
              measured.ringSmall.bytes, measured.ringSmall.us, measured.ringPrivate.bytes, measured.ringPrivate.us,
              measured.ringCached.bytes, measured.ringCached.us,
              measured.ringMemory.bytes, measured.ringMemory.us, measured.arenaSmall.bytes, measured.arenaSmall.us,
              measured.arenaLarge.bytes, measured.arenaLarge.us, measured.treeSmall.bytes, measured.treeSmall.us);
  }
  WEFT_INFO("measured links: alpha %.2f us, %.2f GB/s from memory, %.2f GB/s in cache, %.2f GB/s in L2; arena %.2f us, "
            "%.2f GB/s; tree hop crowding %.2f",
            link_.alphaUs, 1e-3 / link_.betaUsPerB, 1e-3 / (link_.betaUsPerB * link_.inCacheFactor),
            1e-3 / (link_.betaUsPerB * link_.inCacheFactor * link_.inPrivateCacheFactor),
            layout_.arenaLink.alphaUs, 1e-3 / layout_.arenaLink.betaUsPerB, layout_.treeHopCrowding);
  return Status::ok();
}

}  // namespace weft::core
