#include "coll/cost_fit.h"

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

FittedCosts fitAllReduce(const LinkCost& link, const CommLayout& layout, size_t chunkBytes,
                         const MeasuredAllReduce& measured) {
  FittedCosts fitted{link, layout.arenaLink};
  // The model's price of `algorithm` for `bytes` with `edit` applied to a copy of what is fitted.
  auto price = [&](Algorithm algorithm, size_t bytes, const std::function<void(FittedCosts&)>& edit) {
    FittedCosts trial = fitted;
    edit(trial);
    CommLayout l = layout;
    l.arenaLink = trial.arena;
    return predictUs(trial.link, l, Collective::AllReduce, algorithm, bytes, chunkBytes);
  };
  // Each timing mostly moves one price, so one pass in this order settles them: the small
  // calls' bytes cost next to nothing, the large calls' messages little.
  if (const Timing& t = measured.ringSmall; t.us > 0) {
    fitted.link.alphaUs = solveRising(
        [&](double alpha) { return price(Algorithm::Ring, t.bytes, [&](FittedCosts& c) { c.link.alphaUs = alpha; }); },
        t.us, 0.01, 1e4);
  }
  if (const Timing& t = measured.ringMemory; t.us > 0) {
    const LinkCost base = fitted.link;
    const double scale = solveRising(
        [&](double s) {
          return price(Algorithm::Ring, t.bytes, [&](FittedCosts& c) {
            c.link.betaUsPerB = base.betaUsPerB * s;
            c.link.gammaUsPerB = base.gammaUsPerB * s;
          });
        },
        t.us, 1e-3, 1e3);
    fitted.link.betaUsPerB = base.betaUsPerB * scale;
    fitted.link.gammaUsPerB = base.gammaUsPerB * scale;
  }
  if (const Timing& t = measured.ringCached; t.us > 0 && layout.cacheBytesPerRank > 0 && link.inCacheFactor < 1) {
    fitted.link.inCacheFactor = solveRising(
        [&](double f) { return price(Algorithm::Ring, t.bytes, [&](FittedCosts& c) { c.link.inCacheFactor = f; }); },
        t.us, 0.05, 1.0);
  }
  if (layout.arenaBytes == 0) return fitted;
  if (const Timing& t = measured.arenaSmall; t.us > 0) {
    fitted.arena.alphaUs = solveRising(
        [&](double alpha) { return price(Algorithm::OneShot, t.bytes, [&](FittedCosts& c) { c.arena.alphaUs = alpha; }); },
        t.us, 0.01, 1e4);
  }
  if (const Timing& t = measured.arenaLarge; t.us > 0) {
    fitted.arena.betaUsPerB = solveRising(
        [&](double beta) { return price(Algorithm::OneShot, t.bytes, [&](FittedCosts& c) { c.arena.betaUsPerB = beta; }); },
        t.us, 1e-7, 1.0);
  }
  return fitted;
}

}  // namespace weft::coll
