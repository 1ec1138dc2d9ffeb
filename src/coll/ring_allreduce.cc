#include "coll/block_layout.h"
#include "coll/schedules.h"
#include "coll/schedule_builder.h"

namespace weft::coll {

Schedule buildRingAllReduce(const CollectiveShape& shape, const PipelineParams& pipeline) {
  const int n = shape.nranks;
  // Blocks follow ring positions: position p reduces block p+1 and sends to position p+1.
  const int r = shape.ringPosition(shape.rank);
  const size_t esize = shape.elementSize;
  ScheduleBuilder b(shape.inPlace);
  if (n == 1) {
    if (!shape.inPlace && shape.count > 0) {
      b.copy({Buffer::Recv, 0}, {Buffer::Send, 0}, shape.count * esize);
    }
    return b.finish("ring", 0);
  }
  const size_t chunkElements = chunkElementsFor(pipeline.chunkBytes, esize);
  const BlockLayout layout = BlockLayout::balanced(shape.count, n, chunkElements);
  const int next = shape.ringRank(r + 1);
  const int prev = shape.ringRank(r - 1);
  auto block = [n](int x) { return ((x % n) + n) % n; };
  auto at = [&](BufferId buffer, int blk, size_t chunk) {
    return Region{buffer, layout.chunkBegin(blk, chunk) * esize};
  };
  ScratchSlots slots(chunkElements * esize, static_cast<size_t>(pipeline.slots));

  // Reduce-scatter: after n-1 steps this rank holds the full reduction of block r+1.
  for (int s = 0; s < n - 1; ++s) {
    const int sendBlock = block(r - s);
    const int recvBlock = block(r - s - 1);
    const BufferId source = s == 0 ? Buffer::Send : Buffer::Recv;
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
          const Region slot = slots.next();
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
  return b.finish("ring", slots.end());
}

}  // namespace weft::coll
