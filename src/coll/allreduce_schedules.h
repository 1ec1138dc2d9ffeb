// Schedule builders for all-reduce.
#pragma once

#include "coll/schedule.h"

namespace weft::coll {

struct AllReduceShape {
  int nranks;
  int rank;
  size_t count;
  size_t elementSize;
  bool inPlace;
  bool average;  // append the divide-by-nranks step (weftAvg)
  bool recvReduce = false;  // the connection from the previous rank reduces on receipt
};

// Ring reduce-scatter then all-gather, each block cut into chunks of about chunkBytes that
// flow through `slots` scratch buffers, so one chunk is on the wire while another is reduced.
// With shape.recvReduce, each reduce-scatter chunk is reduced straight out of the transport's
// staging memory instead (no scratch, one pass less over the data).
Schedule buildRingAllReduce(const AllReduceShape& shape, size_t chunkBytes, int slots);

// Recursive doubling over the largest power of two of ranks, the others folded in first and
// answered last: log2(n) + 2 rounds of whole-buffer exchanges, for small messages.
Schedule buildRecursiveDoublingAllReduce(const AllReduceShape& shape);

// Every rank sends its whole input to every other rank and reduces all n inputs itself, in
// rank order: one round of n-1 concurrent exchanges, for small messages on few ranks.
Schedule buildOneShotAllReduce(const AllReduceShape& shape);

}  // namespace weft::coll
