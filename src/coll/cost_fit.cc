#include "coll/cost_fit.h"

#include <algorithm>
#include <cmath>
#include <functional>

namespace weft::coll {

namespace {

// The x in [lo, hi] (geometric bisection) where rising(x) reaches `target`; an end where it
// never does.
double solveRising(const std::function<double(double)>& rising, double target, double lo, double hi) {
  if (rising(lo) >= target) return lo;
  if (rising(hi) <= target) return hi;
  for (int i = 0; i < 60; ++i) {
    const double mid = std::sqrt(lo * hi);
    (rising(mid) < target ? lo : hi) = mid;
  }
  return std::sqrt(lo * hi);
}

}  // namespace

FitTimingBytes fitTimingBytes(const LinkCost& link, const CommLayout& layout) {
  constexpr size_t kMaxBytes = size_t{64} << 20, kMinBytes = size_t{64} << 10;
  const bool cacheDiscount = link.inCacheFactor < 1;
  FitTimingBytes t;
  const size_t cache = layout.cacheBytesPerRank;
  const size_t beyond = std::max(2 * cache, size_t{8} << 20);
  if (beyond <= kMaxBytes) t.beyondCache = beyond;
  const size_t inCache = cache / 4;  // a send and a receive buffer: half the share
  if (cacheDiscount && inCache >= kMinBytes && inCache <= kMaxBytes) t.inCache = inCache;
  const size_t inL2 = layout.privateCacheBytesPerRank / 8;  // both buffers: a quarter of the share
  if (cacheDiscount && inL2 >= kMinBytes && inL2 <= kMaxBytes && (t.inCache == 0 || inL2 < t.inCache)) t.inL2 = inL2;
  t.largest = std::max({t.inL2, t.inCache, t.beyondCache, layout.arenaBytes, size_t{1024}});
  return t;
}

bool fitsTreeCrowding(const CommLayout& layout) { return layout.nranks > 2 && layout.ranksPerCpu > 1; }

FittedCosts fitAllReduce(const LinkCost& link, const CommLayout& layout, size_t chunkBytes,
                         const MeasuredAllReduce& measured) {
  FittedCosts fitted{link, layout.arenaLink, layout.treeHopCrowding};
  // Sets one price (via `set`) so that the model's price of `algorithm` for t.bytes is t.us.
  auto fit = [&](Algorithm algorithm, const Timing& t, double lo, double hi,
                 const std::function<void(FittedCosts&, double)>& set) {
    if (t.us <= 0) return;
    auto price = [&](double x) {
      FittedCosts trial = fitted;
      set(trial, x);
      CommLayout l = layout;
      l.arenaLink = trial.arena;
      l.treeHopCrowding = trial.treeHopCrowding;
      return predictUs(trial.link, l, Collective::AllReduce, algorithm, t.bytes, sizeof(float), chunkBytes);
    };
    set(fitted, solveRising(price, t.us, lo, hi));
  };
  // Each timing mostly moves one price, but not only that one: the small call's bytes cost a
  // little, and the large calls' messages too. So the prices are fitted in turn until a pass
  // moves none of them by more than 0.1%; otherwise the last price fitted would pull the small
  // call's prediction away from its timing. Beta and gamma scale the given link's, whose ratio
  // they keep.
  //
  // Where the buffers beyond the cache would be too large to time (a host whose last-level cache
  // is hundreds of MiB: measureLinks skips it), the timing in the cache is the only one of the
  // per-byte costs: it sets them at the cached rate, and the memory's rate follows from the
  // link's discount, kept as it was. Fitting the discount to it instead would leave the memory's
  // rate at the default and every prediction out of the cache off by however far that is.
  auto scaleBytes = [&](FittedCosts& c, double s) {
    c.link.betaUsPerB = link.betaUsPerB * s;
    c.link.gammaUsPerB = link.gammaUsPerB * s;
  };
  const bool memoryTimed = measured.ringMemory.us > 0;
  for (int pass = 0; pass < 20; ++pass) {
    const LinkCost before = fitted.link;
    fit(Algorithm::Ring, measured.ringSmall, 0.01, 1e4, [](FittedCosts& c, double a) { c.link.alphaUs = a; });
    if (memoryTimed) {
      fit(Algorithm::Ring, measured.ringMemory, 1e-3, 1e3, scaleBytes);
      if (layout.cacheBytesPerRank > 0 && link.inCacheFactor < 1) {
        fit(Algorithm::Ring, measured.ringCached, 0.05, 1.0,
            [](FittedCosts& c, double f) { c.link.inCacheFactor = f; });
      }
    } else {
      fit(Algorithm::Ring, measured.ringCached, 1e-3, 1e3, scaleBytes);
    }
    if (layout.privateCacheBytesPerRank > 0 && link.inCacheFactor < 1) {
      fit(Algorithm::Ring, measured.ringPrivate, 0.05, 1.0,
          [](FittedCosts& c, double f) { c.link.inPrivateCacheFactor = f; });
    }
    auto moved = [](double a, double b) { return std::abs(a - b) > 1e-3 * std::abs(b); };
    if (!moved(fitted.link.alphaUs, before.alphaUs) && !moved(fitted.link.betaUsPerB, before.betaUsPerB) &&
        !moved(fitted.link.inCacheFactor, before.inCacheFactor) &&
        !moved(fitted.link.inPrivateCacheFactor, before.inPrivateCacheFactor)) {
      break;
    }
  }
  if (fitsTreeCrowding(layout)) {
    fit(Algorithm::Tree, measured.treeSmall, 0.01, 30.0, [](FittedCosts& c, double x) { c.treeHopCrowding = x; });
  }
  if (layout.arenaBytes == 0) return fitted;
  fit(Algorithm::OneShot, measured.arenaSmall, 0.01, 1e4, [](FittedCosts& c, double a) { c.arena.alphaUs = a; });
  fit(Algorithm::OneShot, measured.arenaLarge, 1e-7, 1.0, [](FittedCosts& c, double b) { c.arena.betaUsPerB = b; });
  return fitted;
}

}  // namespace weft::coll
