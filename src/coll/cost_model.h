// An alpha-beta cost model for every (collective, algorithm): a message of b bytes over one link
// costs alpha + b * beta, and reducing b bytes costs b * gamma. The tuner asks it for the
// fastest algorithm; bench/tuner_accuracy compares its predictions with measured times.
//
// Parameters per link class (shared memory, sockets) have defaults measured on small x86
// machines; WEFT_TUNE=measure times this communicator's links at init instead (rank 0 measures,
// every rank adopts its numbers, so that all ranks choose alike).
#pragma once

#include <cstddef>

#include "coll/collective.h"

namespace weft::coll {

enum class Algorithm : uint8_t { Ring, Tree, RecursiveDoubling, OneShot, Direct };

struct LinkCost {
  double alphaUs;      // per message: latency and software overhead
  double betaUsPerB;   // per byte moved over the link (1 / bandwidth)
  double gammaUsPerB;  // per byte reduced
};

LinkCost defaultSharedMemoryCost();
LinkCost defaultSocketCost();

// Predicted microseconds for `collective` of `bytes` (the shape's: whole buffer, or one rank's
// block for the blocked collectives) on n ranks, pipelined in chunks of chunkBytes.
double predictUs(const LinkCost& link, Collective collective, Algorithm algorithm, size_t bytes, int nranks,
                 size_t chunkBytes);

}  // namespace weft::coll
