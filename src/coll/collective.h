// What a schedule is built for: the collective, its size and this rank's place in it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <tuple>
#include <vector>

#include "coll/rank_order.h"

namespace weft::coll {

enum class Collective : uint8_t {
  AllReduce,
  Broadcast,
  Reduce,
  AllGather,
  ReduceScatter,
  AlltoAll,
  Gather,
  Scatter,
  Send,
  Recv,
};
inline constexpr int kCollectiveCount = 10;

// "all-reduce", "broadcast", ... for messages.
const char* collectiveName(Collective collective);
// Whether it combines values with a reduction operator.
constexpr bool isReducing(Collective c) {
  return c == Collective::AllReduce || c == Collective::Reduce || c == Collective::ReduceScatter;
}

struct CollectiveShape {
  Collective collective = Collective::AllReduce;
  int nranks = 1;
  int rank = 0;
  // Elements: of the whole buffer for all-reduce, broadcast, reduce, send and recv; per rank
  // (one block) for all-gather, reduce-scatter, alltoall, gather and scatter, as in NCCL.
  size_t count = 0;
  size_t elementSize = 1;
  int root = 0;          // broadcast, reduce, gather, scatter: the root; send and recv: the peer
  bool inPlace = false;  // the send buffer is (a block of) the receive buffer; see weft.h
  bool average = false;  // append the divide-by-nranks steps (weftAvg)
  bool recvReduce = false;  // every connection reduces on receipt (straight out of its staging)
  bool forward = false;     // and passes what it receives on through any other (transport::Forward)
  // The planner's ring and trees (rank_order.h); null: rank order. Not part of the key: it is
  // fixed for a communicator, and so is its schedule cache.
  const RankOrder* order = nullptr;

  const RankOrder& rankOrder() const {
    static const RankOrder kRankOrder;
    return order != nullptr ? *order : kRankOrder;
  }
  // Position of `r` in the ring, and the rank at a position (both modulo nranks).
  int ringPosition(int r) const { return rankOrder().ringPosition(r, nranks); }
  int ringRank(int position) const { return rankOrder().ringRank(position, nranks); }
  // `r`'s place in planned tree `which`, and in the binary tree rooted at `root`.
  TreePosition treePosition(int which, int r) const { return rankOrder().treePosition(which, r, nranks); }
  TreePosition rootedTreePosition(int r) const { return rankOrder().rootedPosition(r, root, nranks); }

  size_t bytes() const { return count * elementSize; }
  auto key() const {
    return std::tuple(static_cast<int>(collective), nranks, rank, count, elementSize, root, inPlace, average,
                      recvReduce, forward);
  }
};

}  // namespace weft::coll
