// An alpha-beta cost model for every (collective, algorithm): a message of b bytes over one link
// costs alpha + b * beta, and reducing b bytes costs b * gamma. The tuner asks it for the
// fastest algorithm; bench/tuner_accuracy compares its predictions with measured times.
//
// Parameters per link class (shared memory, sockets) have defaults measured on small x86
// machines; WEFT_TUNE=measure fits them to this communicator's own all-reduces timed at init
// instead (coll/cost_fit.h; rank 0 measures, every rank adopts its numbers, so that all ranks
// choose alike). Tree algorithms are priced by
// the planned trees' depth and fan-out, and every cost grows where ranks outnumber CPUs.
#pragma once

#include <cstddef>

#include "coll/collective.h"
#include "coll/rank_order.h"

namespace weft::coll {

enum class Algorithm : uint8_t { Ring, Tree, RecursiveDoubling, OneShot, Direct };

// How much longer a hop waits for each doubling of the ranks per CPU (see cost_model.cc).
inline constexpr double kHopCrowding = 3.1;

struct LinkCost {
  double alphaUs;      // per message: latency and software overhead
  double betaUsPerB;   // per byte moved over the link (1 / bandwidth), from and to memory
  double gammaUsPerB;  // per byte reduced
  // Beta and gamma scale by this while the buffers fit in the cache each rank has (1: no
  // difference, as for sockets, whose cost is not the memory's).
  double inCacheFactor = 1;
  // And by this too while they fit in its share of a core's L2 (1: no difference; the only
  // value sockets have, and the defaults', which WEFT_TUNE=measure fits where a link has a
  // cache discount).
  double inPrivateCacheFactor = 1;
};

LinkCost defaultSharedMemoryCost();
LinkCost defaultSocketCost();
// The arena: no messages, so no per-message software cost; each peer's input crosses from its
// core's cache to this one's.
LinkCost arenaCost();

// What the model knows of the communicator besides its links: its size, the shape of its
// planned trees, and how crowded its busiest host is.
struct CommLayout {
  int nranks = 1;
  int treeDepth = 0;   // hops from a planned tree's root to its deepest leaf
  int treeFanOut = 2;  // the most children any rank has in the planned trees
  // Ranks per CPU on the busiest host. Above 1 ranks take turns on the cores: every hop waits
  // for its receiver to be scheduled, and each rank copies and reduces at a share of a core.
  double ranksPerCpu = 1;
  // The last-level cache each rank has to itself where that is least (plan::cacheBytesPerRank);
  // 0: unknown, every byte priced at the memory's rate.
  size_t cacheBytesPerRank = 0;
  // The L2 each rank has to itself where that is least (plan::privateCacheBytesPerRank); 0:
  // unknown, no byte priced at the L2's rate.
  size_t privateCacheBytesPerRank = 0;
  // The largest all-reduce the one-shot algorithm runs through the shared-memory arena (all
  // ranks on one host; see coll/arena_allreduce.h) instead of the executor; 0: no arena. With
  // one, the one-shot all-gather and broadcast run through it at any size.
  size_t arenaBytes = 0;
  // What a call through the arena costs: arenaCost() unless WEFT_TUNE=measure fitted it.
  LinkCost arenaLink = arenaCost();
  // How much longer a tree's hop waits for each doubling of the ranks per CPU: kHopCrowding, as a
  // ring's step, unless WEFT_TUNE=measure fitted it. A hop needs its two ranks on CPUs, where a
  // ring's step needs every rank, and hosts schedule that differently: fitted to small tree
  // all-reduces on a 2-CPU Xeon VM, 1.8-2.6 with 4 ranks and 3.8-4.4 with 8.
  double treeHopCrowding = kHopCrowding;
};

// Whether `algorithm` for `collective` of `bytes` runs through the shared-memory arena rather
// than as a schedule on the executor (for a call on its own; a group's calls always take the
// executor).
bool runsOnArena(const CommLayout& layout, Collective collective, Algorithm algorithm, size_t bytes);

// The layout of n ranks following `order`, ranksPerCpu and the cache shares as the caller found
// them (arenaBytes is the caller's to set).
CommLayout layoutOf(const RankOrder& order, int nranks, double ranksPerCpu, size_t cacheBytesPerRank = 0,
                    size_t privateCacheBytesPerRank = 0);

// Predicted microseconds for `collective` of `bytes` (the shape's: whole buffer, or one rank's
// block for the blocked collectives) in elements of elementSize bytes, pipelined in chunks of
// chunkBytes.
double predictUs(const LinkCost& link, const CommLayout& layout, Collective collective, Algorithm algorithm,
                 size_t bytes, size_t elementSize, size_t chunkBytes);

}  // namespace weft::coll
