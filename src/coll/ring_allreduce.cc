#include <algorithm>

#include "coll/block_layout.h"
#include "coll/schedule_merge.h"
#include "coll/schedules.h"
#include "coll/schedule_builder.h"

namespace weft::coll {

namespace {

// One ring (shape.order's `ring`) over the whole of shape's buffer.
Schedule buildOneRing(const CollectiveShape& shape, const PipelineParams& pipeline) {
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
  // A slot holds one chunk, and no chunk is longer than a block (ceil(count / n) elements): a
  // small call must not reserve a whole pipeline chunk per slot.
  const size_t largestBlock = (shape.count + static_cast<size_t>(n) - 1) / static_cast<size_t>(n);
  ScratchSlots slots(std::min(chunkElements, std::max<size_t>(largestBlock, 1)) * esize,
                     static_cast<size_t>(pipeline.slots));

  // 2(n-1) steps: reduce-scatter for t < n-1 (after them this rank holds the full reduction of
  // block r+1), then all-gather, passing the reduced blocks around the ring. At step t a rank
  // sends block r-t chunk by chunk and receives block r-t-1, which it sends on at step t+1;
  // chunks go in forEachStepByDiagonal's order.
  auto emit = [&](int t, size_t c) {
    const bool reducing = t < n - 1;
    const int sending = block(r - t);
    const int receiving = block(r - t - 1);
    if (c < layout.chunks(sending)) {
      const BufferId source = t == 0 ? Buffer::Send : Buffer::Recv;
      b.send(next, at(source, sending, c), layout.chunkElements(sending, c) * esize);
    }
    if (c >= layout.chunks(receiving)) return;
    const size_t elements = layout.chunkElements(receiving, c);
    if (!reducing) {
      b.recv(prev, at(Buffer::Recv, receiving, c), elements * esize);
    } else if (shape.recvReduce) {
      b.recvReduce(prev, at(Buffer::Recv, receiving, c), at(Buffer::Send, receiving, c), elements, esize);
    } else {
      const Region slot = slots.next();
      b.recv(prev, slot, elements * esize);
      b.reduce(at(Buffer::Recv, receiving, c), at(Buffer::Send, receiving, c), slot, elements, esize);
    }
    if (shape.average && t == n - 2) b.divide(at(Buffer::Recv, receiving, c), elements, esize);
  };
  size_t chunks = 0;
  for (int blk = 0; blk < n; ++blk) chunks = std::max(chunks, layout.chunks(blk));
  forEachStepByDiagonal(2 * (n - 1), chunks, emit);
  return b.finish("ring", slots.end());
}

}  // namespace

// With several channels, channel c's ring reduces the c-th share of the buffer (shares in whole
// 64-byte lines), so the rings' different neighbours within a host work at once, and their
// hops between hosts leave by different ranks. Only while every channel's blocks stay this
// large (per message, a channel's extra start costs about what 32 KiB take to move over a
// socket); smaller buffers take the first ring alone.
constexpr size_t kMinChannelBlockBytes = 32 * 1024;

Schedule buildRingAllReduce(const CollectiveShape& shape, const PipelineParams& pipeline) {
  const auto& rings = shape.rankOrder().channelRings;
  const size_t channels = rings.size();
  const size_t n = static_cast<size_t>(shape.nranks);
  if (channels < 2 || n < 2 || shape.bytes() < channels * n * kMinChannelBlockBytes) return buildOneRing(shape, pipeline);
  const size_t line = std::max<size_t>(1, 64 / shape.elementSize);
  std::vector<RankOrder> orders(channels, shape.rankOrder());
  std::vector<Schedule> parts;
  std::vector<size_t> offsets;
  for (size_t c = 0; c < channels; ++c) {
    const size_t begin = shape.count * c / channels / line * line;
    const size_t end = c + 1 == channels ? shape.count : shape.count * (c + 1) / channels / line * line;
    orders[c].ring = rings[c];
    orders[c].channelRings.clear();
    CollectiveShape part = shape;
    part.order = &orders[c];
    part.count = end - begin;
    parts.push_back(buildOneRing(part, pipeline));
    offsets.push_back(begin * shape.elementSize);
  }
  Schedule out = concatenateParts(parts, offsets);
  out.channels = static_cast<int>(channels);
  return out;
}

}  // namespace weft::coll
