// Fitting the cost model to timed all-reduces (WEFT_TUNE=measure). For the links: the
// per-message cost from a small ring all-reduce, the per-byte costs from one too large for the
// cache, the discount while the buffers stay in the cache from one that fits, and the further
// discount while they stay in the L2 from one that fits there. For the shared-memory arena: its
// per-call cost from a one-shot of a few bytes through it, its per-byte cost from the largest it
// takes. Where ranks share CPUs, how a tree's hop waits for them, from
// a small tree all-reduce. Each is found so that the model's own price (predictUs) matches the
// time, which keeps the crowding and pipelining the model applies out of the fitted numbers.
#pragma once

#include <cstddef>

#include "coll/cost_model.h"

namespace weft::coll {

// Mean microseconds per out-of-place float32 all-reduce of `bytes`; us 0: not timed.
struct Timing {
  size_t bytes = 0;
  double us = 0;
};

struct MeasuredAllReduce {
  Timing ringSmall;    // latency-bound
  Timing ringCached;   // footprint within half the rank's cache share
  Timing ringMemory;   // footprint beyond twice the rank's cache share
  Timing arenaSmall;   // one-shot through the arena, a few bytes
  Timing arenaLarge;   // one-shot through the arena, the most it takes
  Timing treeSmall;    // the tree, latency-bound, where ranks share CPUs
  Timing ringPrivate;  // footprint within a quarter of the rank's L2 share
};

// The bytes of the ring all-reduces WEFT_TUNE=measure times (0: not timed) besides the small
// one, and the largest buffer any of its timings needs:
// - inL2: buffers in a quarter of the rank's L2 share, where that is at least 64 KiB (below it
//   the per-message costs would decide the time) and under inCache;
// - inCache: in half its cache share, from 64 KiB;
// - beyondCache: twice that share, at least 8 MiB.
// The first two only where the link has a cache discount (not sockets); none over 64 MiB.
struct FitTimingBytes {
  size_t inL2 = 0;
  size_t inCache = 0;
  size_t beyondCache = 0;
  size_t largest = 0;  // of those, the arena's largest call and the small call (1 KiB)
};
FitTimingBytes fitTimingBytes(const LinkCost& link, const CommLayout& layout);

struct FittedCosts {
  LinkCost link;
  LinkCost arena;
  double treeHopCrowding = kHopCrowding;  // CommLayout::treeHopCrowding
};

// Whether the tree's hop crowding is timed and fitted for `layout`: where ranks outnumber CPUs
// (elsewhere a hop's wait does not grow), with more than 2 ranks (with 2 the tree is the ring).
bool fitsTreeCrowding(const CommLayout& layout);

// `link` and `layout.arenaLink` fitted to `measured`: alphaUs, betaUsPerB and gammaUsPerB (their
// ratio kept), inCacheFactor and inPrivateCacheFactor for the link (only where the link has a
// cache discount, as sockets do not, and the layout knows that cache), alphaUs and betaUsPerB
// for the arena, and the layout's treeHopCrowding (where fitsTreeCrowding). A part
// whose timing is missing keeps what it had; where the timing beyond the cache is missing, the
// one in it sets beta and gamma, and the discount stays.
FittedCosts fitAllReduce(const LinkCost& link, const CommLayout& layout, size_t chunkBytes,
                         const MeasuredAllReduce& measured);

}  // namespace weft::coll
