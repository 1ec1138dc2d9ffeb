#include "coll/rank_order.h"

namespace weft::coll {

int RankOrder::treeDepth(int nranks) const {
  int depth = 0;
  for (int which = 0; which < 2; ++which) {
    for (int r = 0; r < nranks; ++r) {
      int hops = 0;
      // At most nranks - 1 hops in a tree; the bound also ends a walk round a malformed one.
      for (int at = parentOf(which, r, nranks); at >= 0 && hops < nranks; ++hops) at = parentOf(which, at, nranks);
      depth = std::max(depth, hops);
    }
  }
  return depth;
}

int RankOrder::treeFanOut(int nranks) const {
  int fanOut = 0;
  for (int which = 0; which < 2; ++which) {
    std::vector<int> children(static_cast<size_t>(std::max(nranks, 0)), 0);
    for (int r = 0; r < nranks; ++r) {
      const int parent = parentOf(which, r, nranks);
      if (parent >= 0 && parent < nranks) fanOut = std::max(fanOut, ++children[static_cast<size_t>(parent)]);
    }
  }
  return fanOut;
}

}  // namespace weft::coll
