// The orders a communicator's algorithms follow, from the planner (plan/planner.h) and fixed for
// the communicator's life: the ring of each channel, and the two trees of its double binary
// tree (hosts in NCCL's double binary tree, each host's ranks chained below its first one).
// Empty (or sized for another rank count) means rank order and one binary tree in rank order,
// as for a communicator built without a plan.
#pragma once

#include <algorithm>
#include <array>
#include <vector>

namespace weft::coll {

// A rank's place in one tree. In the planned trees a host's first rank can have three
// children: two hosts below it in the host tree and the next rank of its own host's chain.
struct TreePosition {
  int parent = -1;            // -1 at the root
  std::vector<int> children;  // in rank order for the planned trees, 2v+1 before 2v+2 for the rooted one
};

struct RankOrder {
  std::vector<int> ring;                      // every rank once, in ring order
  std::array<std::vector<int>, 2> treeParent;  // by rank, -1 at the root; each tree spans every rank
  // Every channel's ring, the first being `ring`, where the plan has two or more channels
  // (several NICs per host): the ring all-reduce then runs one ring per channel, each over its
  // share of the buffer. Empty: one channel.
  std::vector<std::vector<int>> channelRings;

  // Position of `rank` in the ring, and the rank at a position (modulo nranks).
  int ringPosition(int rank, int nranks) const {
    if (ring.size() != static_cast<size_t>(nranks)) return rank;
    const auto it = std::find(ring.begin(), ring.end(), rank);
    return it == ring.end() ? rank : static_cast<int>(it - ring.begin());
  }
  int ringRank(int position, int nranks) const {
    const int p = ((position % nranks) + nranks) % nranks;
    return ring.size() != static_cast<size_t>(nranks) ? p : ring[static_cast<size_t>(p)];
  }

  // `rank`'s place in planned tree `which` (0 or 1); without a plan, the rank-order binary tree.
  TreePosition treePosition(int which, int rank, int nranks) const {
    const std::vector<int>& parent = treeParent[static_cast<size_t>(which)];
    if (parent.size() != static_cast<size_t>(nranks)) return binaryPosition(rank, 0, nranks);
    TreePosition pos;
    pos.parent = parent[static_cast<size_t>(rank)];
    for (int r = 0; r < nranks; ++r) {
      if (parent[static_cast<size_t>(r)] == rank) pos.children.push_back(r);
    }
    return pos;
  }

  // A binary tree rooted at `root` over ring positions: virtual position v (counted from the
  // root's) has children 2v+1 and 2v+2, so the depth is floor(log2 n) and ranks near each other
  // in the ring (the same host) tend to share subtrees. For the rooted collectives, whose root
  // the planned trees cannot know.
  TreePosition rootedPosition(int rank, int root, int nranks) const {
    const int base = ringPosition(root, nranks);
    const int v = (ringPosition(rank, nranks) - base + nranks) % nranks;
    auto real = [&](int virtualPosition) { return ringRank(virtualPosition + base, nranks); };
    TreePosition pos;
    if (v > 0) pos.parent = real((v - 1) / 2);
    for (int child = 2 * v + 1; child <= 2 * v + 2 && child < nranks; ++child) pos.children.push_back(real(child));
    return pos;
  }

  // The longest root-to-leaf path, and the most children any rank has, over both trees.
  int treeDepth(int nranks) const;
  int treeFanOut(int nranks) const;

 private:
  int parentOf(int which, int rank, int nranks) const {
    const std::vector<int>& parent = treeParent[static_cast<size_t>(which)];
    return parent.size() == static_cast<size_t>(nranks) ? parent[static_cast<size_t>(rank)]
                                                        : binaryPosition(rank, 0, nranks).parent;
  }
  static TreePosition binaryPosition(int rank, int root, int nranks) { return RankOrder{}.rootedPosition(rank, root, nranks); }
};

}  // namespace weft::coll
