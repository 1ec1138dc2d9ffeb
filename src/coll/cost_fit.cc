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
  // Sets one price (via `set`) so that the model's price of `algorithm` for t.bytes is t.us.
  auto fit = [&](Algorithm algorithm, const Timing& t, double lo, double hi,
                 const std::function<void(FittedCosts&, double)>& set) {
    if (t.us <= 0) return;
    auto price = [&](double x) {
      FittedCosts trial = fitted;
      set(trial, x);
      CommLayout l = layout;
      l.arenaLink = trial.arena;
      return predictUs(trial.link, l, Collective::AllReduce, algorithm, t.bytes, chunkBytes);
    };
    set(fitted, solveRising(price, t.us, lo, hi));
  };
  // Each timing mostly moves one price, so one pass in this order settles them: the small
  // calls' bytes cost next to nothing, the large calls' messages little.
  fit(Algorithm::Ring, measured.ringSmall, 0.01, 1e4, [](FittedCosts& c, double a) { c.link.alphaUs = a; });
  const LinkCost base = fitted.link;
  fit(Algorithm::Ring, measured.ringMemory, 1e-3, 1e3, [&](FittedCosts& c, double s) {
    c.link.betaUsPerB = base.betaUsPerB * s;
    c.link.gammaUsPerB = base.gammaUsPerB * s;
  });
  if (layout.cacheBytesPerRank > 0 && link.inCacheFactor < 1) {
    fit(Algorithm::Ring, measured.ringCached, 0.05, 1.0, [](FittedCosts& c, double f) { c.link.inCacheFactor = f; });
  }
  if (layout.arenaBytes == 0) return fitted;
  fit(Algorithm::OneShot, measured.arenaSmall, 0.01, 1e4, [](FittedCosts& c, double a) { c.arena.alphaUs = a; });
  fit(Algorithm::OneShot, measured.arenaLarge, 1e-7, 1.0, [](FittedCosts& c, double b) { c.arena.betaUsPerB = b; });
  return fitted;
}

}  // namespace weft::coll
