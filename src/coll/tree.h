// A binary tree over the ranks rooted at `root`: virtual rank v = (rank - root) mod n has
// children 2v+1 and 2v+2 and parent (v-1)/2, so the depth is floor(log2 n).
#pragma once

namespace weft::coll {

struct TreePosition {
  int parent = -1;  // -1 at the root
  int children[2] = {-1, -1};
  int childCount = 0;
};

inline TreePosition binaryTreePosition(int rank, int root, int nranks) {
  const int v = (rank - root + nranks) % nranks;
  auto real = [&](int virtualRank) { return (virtualRank + root) % nranks; };
  TreePosition pos;
  if (v > 0) pos.parent = real((v - 1) / 2);
  for (int child = 2 * v + 1; child <= 2 * v + 2 && child < nranks; ++child) pos.children[pos.childCount++] = real(child);
  return pos;
}

}  // namespace weft::coll
