// All-gather and reduce-scatter: n blocks of shape.count elements, one per rank, passed (and
// reduced) around the planned ring in pipelined chunks, or exchanged directly in one round.
//
// In place, this rank's own block of the larger buffer is named through the receive buffer,
// the one the builder knows it aliases, so hazards on it are tracked.
#include "coll/block_layout.h"
#include "coll/schedule_builder.h"
#include "coll/schedules.h"

namespace weft::coll {
namespace {

// One contribution (reduce-scatter) or result (all-gather) block per rank.
struct Blocks {
  Blocks(const CollectiveShape& s, size_t chunkElements)
      : layout(BlockLayout::uniform(s.count, s.nranks, chunkElements)), shape(s) {}

  size_t blockBytes() const { return shape.bytes(); }
  size_t chunkBytes(int block, size_t c) const { return layout.chunkElements(block, c) * shape.elementSize; }
  // Chunk c of `block` in the n-block buffer `buffer`.
  Region at(BufferId buffer, int block, size_t c) const { return {buffer, layout.chunkBegin(block, c) * shape.elementSize}; }
  // Chunk c of the one-block buffer `buffer` (offsets as in block 0).
  Region single(BufferId buffer, size_t c) const { return at(buffer, 0, c); }

  BlockLayout layout;
  const CollectiveShape& shape;
};

Schedule copyInput(const CollectiveShape& shape, Region from, const char* algorithm) {
  ScheduleBuilder b(false);
  if (!shape.inPlace && shape.bytes() > 0) b.copy({Buffer::Recv, 0}, from, shape.bytes());
  return b.finish(algorithm, 0);
}

}  // namespace

Schedule buildRingAllGather(const CollectiveShape& shape, const PipelineParams& pipeline) {
  const int n = shape.nranks, r = shape.rank;
  const Blocks blocks(shape, chunkElementsFor(pipeline.chunkBytes, shape.elementSize));
  ScheduleBuilder b(false);
  if (shape.bytes() == 0) return b.finish("ring", 0);
  // Around the planned ring: at step s, the block of the rank s positions upstream moves on,
  // each chunk as soon as it has arrived (forEachStepByDiagonal).
  const int p = shape.ringPosition(r);
  const int next = shape.ringRank(p + 1), prev = shape.ringRank(p - 1);
  forEachStepByDiagonal(std::max(n - 1, 1), blocks.layout.chunks(0), [&](int s, size_t c) {
    const int sendBlock = shape.ringRank(p - s), recvBlock = shape.ringRank(p - s - 1);
    // The first step sends this rank's input straight from the send buffer, and copies it into
    // place chunk by chunk while the ring drains.
    if (s == 0 && !shape.inPlace) {
      if (n > 1) b.send(next, blocks.single(Buffer::Send, c), blocks.chunkBytes(r, c));
      b.copy(blocks.at(Buffer::Recv, r, c), blocks.single(Buffer::Send, c), blocks.chunkBytes(r, c));
    } else if (n > 1) {
      b.send(next, blocks.at(Buffer::Recv, sendBlock, c), blocks.chunkBytes(sendBlock, c));
    }
    if (n > 1) b.recv(prev, blocks.at(Buffer::Recv, recvBlock, c), blocks.chunkBytes(recvBlock, c));
  });
  return b.finish("ring", 0);
}

Schedule buildRingReduceScatter(const CollectiveShape& shape, const PipelineParams& pipeline) {
  const int n = shape.nranks, r = shape.rank;
  const size_t chunkElements = chunkElementsFor(pipeline.chunkBytes, shape.elementSize);
  const Blocks blocks(shape, chunkElements);
  if (n == 1 || shape.bytes() == 0) return copyInput(shape, {Buffer::Send, 0}, "ring");
  ScheduleBuilder b(false);
  const int p = shape.ringPosition(r);
  const int next = shape.ringRank(p + 1), prev = shape.ringRank(p - 1);
  // A partial lives from its step to the next, one diagonal later, while at most n-2 other
  // partials are written (forEachStepByDiagonal): with n slots or more none is overwritten
  // before it is sent on, however many chunks there are.
  const size_t partialSlots = std::max(2 * static_cast<size_t>(pipeline.slots), static_cast<size_t>(n));
  ScratchSlots partials(std::min(chunkElements, shape.count) * shape.elementSize, partialSlots);
  ScratchSlots recvSlots(std::min(chunkElements, shape.count) * shape.elementSize, static_cast<size_t>(pipeline.slots),
                         partials.capacity());
  auto input = [&](int block, size_t c) {
    return block == r && shape.inPlace ? blocks.single(Buffer::Recv, c) : blocks.at(Buffer::Send, block, c);
  };
  const size_t chunks = blocks.layout.chunks(0);
  std::vector<Region> received(chunks);  // the last step's partial of each chunk
  // Over forwarding connections a partial goes straight on into the next rank's slot
  // (ring_allreduce.cc's reduce-scatter half does the same).
  std::vector<uint32_t> forwarding(chunks, ScheduleBuilder::kNoStep);  // per chunk: the step the next send is
  // Step s sends the partial of the block of ring position p-s-1 and adds this rank's input to
  // that of p-s-2; the last step completes this rank's own block.
  forEachStepByDiagonal(n - 1, chunks, [&](int s, size_t c) {
    const int sendBlock = shape.ringRank(p - s - 1), recvBlock = shape.ringRank(p - s - 2);
    const bool last = s == n - 2;
    const size_t elements = blocks.layout.chunkElements(0, c);
    b.sendOn(forwarding[c], next, s == 0 ? input(sendBlock, c) : received[c], elements * shape.elementSize);
    forwarding[c] = ScheduleBuilder::kNoStep;
    const Region dst = last ? blocks.single(Buffer::Recv, c) : partials.next();
    if (shape.forward && shape.recvReduce && !last) {
      const Region local = input(recvBlock, c);
      forwarding[c] = b.recvForward(prev, next, dst, &local, elements * shape.elementSize, shape.elementSize, false);
    } else if (shape.recvReduce) {
      b.recvReduce(prev, dst, input(recvBlock, c), elements, shape.elementSize);
    } else {
      const Region slot = recvSlots.next();
      b.recv(prev, slot, elements * shape.elementSize);
      b.reduce(dst, input(recvBlock, c), slot, elements, shape.elementSize);
    }
    if (last && shape.average) b.divide(dst, elements, shape.elementSize);
    received[c] = dst;
  });
  return b.finish("ring", std::max(partials.end(), recvSlots.end()));
}

Schedule buildOneShotAllGather(const CollectiveShape& shape) {
  const int n = shape.nranks, r = shape.rank;
  const size_t bytes = shape.bytes();
  ScheduleBuilder b(false);
  if (bytes == 0) return b.finish("one-shot", 0);
  const Region own = shape.inPlace ? Region{Buffer::Recv, r * bytes} : Region{Buffer::Send, 0};
  if (!shape.inPlace) b.copy({Buffer::Recv, r * bytes}, own, bytes);
  for (int k = 1; k < n; ++k) {
    const int peer = (r + k) % n;
    b.send(peer, own, bytes);
    b.recv(peer, {Buffer::Recv, static_cast<size_t>(peer) * bytes}, bytes);
  }
  return b.finish("one-shot", 0);
}

Schedule buildOneShotReduceScatter(const CollectiveShape& shape) {
  const int n = shape.nranks, r = shape.rank;
  const size_t bytes = shape.bytes();
  if (n == 1 || bytes == 0) return copyInput(shape, {Buffer::Send, 0}, "one-shot");
  ScheduleBuilder b(false);
  // Peers' contributions land in scratch slots; in place, the first reduction overwrites this
  // rank's own contribution before rank order reaches it (unless it is rank 0 or 1), so it is
  // set aside in one more slot.
  const bool keepOwn = shape.inPlace && r >= 2;
  auto contribution = [&](int rank) -> Region {
    if (rank == r && !keepOwn) return shape.inPlace ? Region{Buffer::Recv, 0} : Region{Buffer::Send, r * bytes};
    const int slot = rank == r ? n - 1 : rank < r ? rank : rank - 1;
    return {Buffer::Scratch, static_cast<size_t>(slot) * bytes};
  };
  if (keepOwn) b.copy(contribution(r), {Buffer::Recv, 0}, bytes);
  for (int k = 1; k < n; ++k) {
    const int peer = (r + k) % n;
    b.send(peer, {Buffer::Send, static_cast<size_t>(peer) * bytes}, bytes);
    b.recv(peer, contribution(peer), bytes);
  }
  // Rank order on every rank, as in the one-shot all-reduce.
  const Region out{Buffer::Recv, 0};
  b.reduce(out, contribution(0), contribution(1), shape.count, shape.elementSize);
  for (int rank = 2; rank < n; ++rank) b.reduce(out, out, contribution(rank), shape.count, shape.elementSize);
  if (shape.average) b.divide(out, shape.count, shape.elementSize);
  return b.finish("one-shot", static_cast<size_t>(keepOwn ? n : n - 1) * bytes);
}

}  // namespace weft::coll
