#include <algorithm>

#include "coll/allreduce_schedules.h"
#include "coll/schedule_builder.h"

namespace weft::coll {
namespace {

// The data cut into nranks balanced blocks, each cut into chunks.
class BlockLayout {
 public:
  BlockLayout(size_t count, int nranks, size_t chunkElements)
      : count_(count), nranks_(static_cast<size_t>(nranks)), chunkElements_(chunkElements) {}

  size_t blockBegin(int block) const { return count_ * static_cast<size_t>(block) / nranks_; }
  size_t blockEnd(int block) const { return count_ * (static_cast<size_t>(block) + 1) / nranks_; }
  size_t chunks(int block) const {
    return (blockEnd(block) - blockBegin(block) + chunkElements_ - 1) / chunkElements_;
  }
  size_t chunkBegin(int block, size_t chunk) const { return blockBegin(block) + chunk * chunkElements_; }
  size_t chunkElements(int block, size_t chunk) const {
    return std::min(chunkElements_, blockEnd(block) - chunkBegin(block, chunk));
  }

 private:
  size_t count_;
  size_t nranks_;
  size_t chunkElements_;
};

}  // namespace

Schedule buildRingAllReduce(const AllReduceShape& shape, size_t chunkBytes, int slots) {
  const int n = shape.nranks;
  const int r = shape.rank;
  const size_t esize = shape.elementSize;
  ScheduleBuilder b(shape.inPlace);
  if (n == 1) {
    if (!shape.inPlace && shape.count > 0) {
      b.copy({Buffer::Recv, 0}, {Buffer::Send, 0}, shape.count * esize);
    }
    return b.finish("ring", 0);
  }
  const size_t chunkElements = std::max<size_t>(1, chunkBytes / esize);
  const BlockLayout layout(shape.count, n, chunkElements);
  const int next = (r + 1) % n;
  const int prev = (r + n - 1) % n;
  auto block = [n](int x) { return ((x % n) + n) % n; };
  auto at = [&](Buffer buffer, int blk, size_t chunk) {
    return Region{buffer, layout.chunkBegin(blk, chunk) * esize};
  };
  size_t slotCount = static_cast<size_t>(std::max(1, slots));
  size_t nextSlot = 0;

  // Reduce-scatter: after n-1 steps this rank holds the full reduction of block r+1.
  for (int s = 0; s < n - 1; ++s) {
    const int sendBlock = block(r - s);
    const int recvBlock = block(r - s - 1);
    const Buffer source = s == 0 ? Buffer::Send : Buffer::Recv;
    const size_t chunks = std::max(layout.chunks(sendBlock), layout.chunks(recvBlock));
    for (size_t c = 0; c < chunks; ++c) {
      if (c < layout.chunks(sendBlock)) {
        b.send(next, at(source, sendBlock, c), layout.chunkElements(sendBlock, c) * esize);
      }
      if (c < layout.chunks(recvBlock)) {
        const size_t elements = layout.chunkElements(recvBlock, c);
        if (shape.recvReduce) {
          b.recvReduce(prev, at(Buffer::Recv, recvBlock, c), at(Buffer::Send, recvBlock, c), elements, esize);
        } else {
          const Region slot{Buffer::Scratch, (nextSlot++ % slotCount) * chunkElements * esize};
          b.recv(prev, slot, elements * esize);
          b.reduce(at(Buffer::Recv, recvBlock, c), at(Buffer::Send, recvBlock, c), slot, elements, esize);
        }
        if (shape.average && s == n - 2) b.divide(at(Buffer::Recv, recvBlock, c), elements, esize);
      }
    }
  }

  // All-gather: pass the reduced blocks around the ring.
  for (int s = 0; s < n - 1; ++s) {
    const int sendBlock = block(r + 1 - s);
    const int recvBlock = block(r - s);
    const size_t chunks = std::max(layout.chunks(sendBlock), layout.chunks(recvBlock));
    for (size_t c = 0; c < chunks; ++c) {
      if (c < layout.chunks(sendBlock)) {
        b.send(next, at(Buffer::Recv, sendBlock, c), layout.chunkElements(sendBlock, c) * esize);
      }
      if (c < layout.chunks(recvBlock)) {
        b.recv(prev, at(Buffer::Recv, recvBlock, c), layout.chunkElements(recvBlock, c) * esize);
      }
    }
  }
  size_t scratch = std::min(nextSlot, slotCount) * chunkElements * esize;
  return b.finish("ring", scratch);
}

}  // namespace weft::coll
