// Broadcast and reduce as a pipelined chain (the planned ring from the root) or a binary tree
// over ring positions, and all-reduce as a reduce and broadcast over the planned double binary
// tree.
#include "coll/block_layout.h"
#include "coll/schedule_builder.h"
#include "coll/schedules.h"

namespace weft::coll {
namespace {

// Chunks of one contiguous buffer (a single "block").
struct Chunks {
  Chunks(const CollectiveShape& shape, const PipelineParams& pipeline)
      : layout(BlockLayout::uniform(shape.count, 1, chunkElementsFor(pipeline.chunkBytes, shape.elementSize))),
        esize(shape.elementSize),
        slotBytes(std::min(chunkElementsFor(pipeline.chunkBytes, shape.elementSize), shape.count) * shape.elementSize) {}

  size_t count() const { return layout.chunks(0); }
  size_t elements(size_t c) const { return layout.chunkElements(0, c); }
  size_t bytes(size_t c) const { return elements(c) * esize; }
  Region at(BufferId buffer, size_t c) const { return {buffer, layout.chunkBegin(0, c) * esize}; }

  BlockLayout layout;
  size_t esize;
  size_t slotBytes;
};

// Folds `incoming` from `peer` into dst = current op incoming, on receipt where the transport
// can, else through a scratch slot. Returns dst.
Region reduceFrom(ScheduleBuilder& b, const CollectiveShape& shape, ScratchSlots& recvSlots, int peer, Region dst,
                  Region current, size_t elements) {
  if (shape.recvReduce) {
    b.recvReduce(peer, dst, current, elements, shape.elementSize);
  } else {
    Region slot = recvSlots.next();
    b.recv(peer, slot, elements * shape.elementSize);
    b.reduce(dst, current, slot, elements, shape.elementSize);
  }
  return dst;
}

// reduceFrom, then dst sent on to `to`; over forwarding connections one step that reduces
// straight into `to`'s slot (dst is then only written where that slot was not free).
void reduceFromAndSend(ScheduleBuilder& b, const CollectiveShape& shape, ScratchSlots& recvSlots, int peer, Region dst,
                       Region current, size_t elements, int to) {
  if (shape.forward && shape.recvReduce) {
    b.forwardSend(b.recvForward(peer, to, dst, &current, elements * shape.elementSize, shape.elementSize, false));
    return;
  }
  reduceFrom(b, shape, recvSlots, peer, dst, current, elements);
  b.send(to, dst, elements * shape.elementSize);
}

// A receive into dst that goes on to `to` as well (fused where connections forward); dst keeps it.
void recvAndSend(ScheduleBuilder& b, const CollectiveShape& shape, int peer, Region dst, size_t bytes, int to) {
  if (shape.forward) {
    b.forwardSend(b.recvForward(peer, to, dst, nullptr, bytes, shape.elementSize, true));
    return;
  }
  b.recv(peer, dst, bytes);
  b.send(to, dst, bytes);
}

// One chunk's tree reduction: `input` op every child's partial, accumulated in `acc`, sent up
// to the parent. Returns where this rank's partial ends (input itself at a leaf).
Region treeReduceChunk(ScheduleBuilder& b, const CollectiveShape& shape, const TreePosition& pos,
                       ScratchSlots& recvSlots, Region input, Region acc, size_t elements) {
  Region current = input;
  for (size_t i = 0; i < pos.children.size(); ++i) {
    if (i + 1 == pos.children.size() && pos.parent >= 0) {
      reduceFromAndSend(b, shape, recvSlots, pos.children[i], acc, current, elements, pos.parent);
      return acc;
    }
    current = reduceFrom(b, shape, recvSlots, pos.children[i], acc, current, elements);
  }
  if (pos.parent >= 0) b.send(pos.parent, current, elements * shape.elementSize);
  return current;
}

// The one-rank case of every rooted collective: the data is already where it belongs.
Schedule copyOnly(const CollectiveShape& shape, const char* algorithm) {
  ScheduleBuilder b(shape.inPlace);
  if (!shape.inPlace && shape.bytes() > 0) b.copy({Buffer::Recv, 0}, {Buffer::Send, 0}, shape.bytes());
  return b.finish(algorithm, 0);
}

}  // namespace

Schedule buildRingBroadcast(const CollectiveShape& shape, const PipelineParams& pipeline) {
  const int n = shape.nranks;
  if (n == 1 || shape.bytes() == 0) return shape.rank == shape.root ? copyOnly(shape, "ring") : ScheduleBuilder(false).finish("ring", 0);
  const int p = shape.ringPosition(shape.rank);
  const int v = (p - shape.ringPosition(shape.root) + n) % n;
  const int prev = shape.ringRank(p - 1), next = shape.ringRank(p + 1);
  const Chunks chunks(shape, pipeline);
  ScheduleBuilder b(shape.inPlace);
  for (size_t c = 0; c < chunks.count(); ++c) {
    const Region mine = chunks.at(Buffer::Recv, c);
    if (v == 0) {
      b.send(next, shape.inPlace ? mine : chunks.at(Buffer::Send, c), chunks.bytes(c));
      // The root's own copy goes chunk by chunk, done while it waits for the chain to drain.
      if (!shape.inPlace) b.copy(mine, chunks.at(Buffer::Send, c), chunks.bytes(c));
    } else {
      b.recv(prev, mine, chunks.bytes(c));
      if (v < n - 1) b.send(next, mine, chunks.bytes(c));
    }
  }
  return b.finish("ring", 0);
}

Schedule buildOneShotBroadcast(const CollectiveShape& shape) {
  const int n = shape.nranks, r = shape.rank;
  if (n == 1 || shape.bytes() == 0) return r == shape.root ? copyOnly(shape, "one-shot") : ScheduleBuilder(false).finish("one-shot", 0);
  ScheduleBuilder b(shape.inPlace);
  if (r != shape.root) {
    b.recv(shape.root, {Buffer::Recv, 0}, shape.bytes());
    return b.finish("one-shot", 0);
  }
  const Region data{shape.inPlace ? Buffer::Recv : Buffer::Send, 0};
  for (int k = 1; k < n; ++k) b.send((r + k) % n, data, shape.bytes());
  if (!shape.inPlace) b.copy({Buffer::Recv, 0}, {Buffer::Send, 0}, shape.bytes());
  return b.finish("one-shot", 0);
}

Schedule buildRingReduce(const CollectiveShape& shape, const PipelineParams& pipeline) {
  const int n = shape.nranks;
  if (n == 1 || shape.bytes() == 0) return copyOnly(shape, "ring");
  // Partials flow along the ring from n-1 positions after the root down to the root.
  const int p = shape.ringPosition(shape.rank);
  const int v = (p - shape.ringPosition(shape.root) + n) % n;
  const int upstream = shape.ringRank(p + 1), downstream = shape.ringRank(p - 1);
  const Chunks chunks(shape, pipeline);
  const size_t slots = static_cast<size_t>(pipeline.slots);
  ScratchSlots recvSlots(chunks.slotBytes, slots);
  ScratchSlots accSlots(chunks.slotBytes, slots, recvSlots.capacity());
  ScheduleBuilder b(shape.inPlace);
  for (size_t c = 0; c < chunks.count(); ++c) {
    const Region input = chunks.at(Buffer::Send, c);
    if (v == n - 1) {
      b.send(downstream, input, chunks.bytes(c));
      continue;
    }
    const Region acc = v == 0 ? chunks.at(Buffer::Recv, c) : accSlots.next();
    if (v > 0) {
      reduceFromAndSend(b, shape, recvSlots, upstream, acc, input, chunks.elements(c), downstream);
      continue;
    }
    reduceFrom(b, shape, recvSlots, upstream, acc, input, chunks.elements(c));
    if (shape.average) b.divide(acc, chunks.elements(c), shape.elementSize);
  }
  return b.finish("ring", std::max(recvSlots.end(), accSlots.end()));
}

Schedule buildTreeBroadcast(const CollectiveShape& shape, const PipelineParams& pipeline) {
  if (shape.nranks == 1 || shape.bytes() == 0) {
    return shape.rank == shape.root ? copyOnly(shape, "tree") : ScheduleBuilder(false).finish("tree", 0);
  }
  const TreePosition pos = shape.rootedTreePosition(shape.rank);
  const Chunks chunks(shape, pipeline);
  ScheduleBuilder b(shape.inPlace);
  const bool root = pos.parent < 0;
  for (size_t c = 0; c < chunks.count(); ++c) {
    const Region mine = chunks.at(Buffer::Recv, c);
    const Region source = root && !shape.inPlace ? chunks.at(Buffer::Send, c) : mine;
    if (!root) b.recv(pos.parent, mine, chunks.bytes(c));
    for (int child : pos.children) b.send(child, source, chunks.bytes(c));
    if (root && !shape.inPlace) b.copy(mine, source, chunks.bytes(c));
  }
  return b.finish("tree", 0);
}

Schedule buildTreeReduce(const CollectiveShape& shape, const PipelineParams& pipeline) {
  if (shape.nranks == 1 || shape.bytes() == 0) return copyOnly(shape, "tree");
  const TreePosition pos = shape.rootedTreePosition(shape.rank);
  const Chunks chunks(shape, pipeline);
  const size_t slots = static_cast<size_t>(pipeline.slots);
  ScratchSlots recvSlots(chunks.slotBytes, 2 * slots);
  ScratchSlots accSlots(chunks.slotBytes, slots, recvSlots.capacity());
  ScheduleBuilder b(shape.inPlace);
  const bool root = pos.parent < 0;
  for (size_t c = 0; c < chunks.count(); ++c) {
    if (pos.children.empty()) {  // a leaf
      b.send(pos.parent, chunks.at(Buffer::Send, c), chunks.bytes(c));
      continue;
    }
    const Region acc = root ? chunks.at(Buffer::Recv, c) : accSlots.next();
    treeReduceChunk(b, shape, pos, recvSlots, chunks.at(Buffer::Send, c), acc, chunks.elements(c));
    if (root && shape.average) b.divide(acc, chunks.elements(c), shape.elementSize);
  }
  return b.finish("tree", std::max(recvSlots.end(), accSlots.end()));
}

Schedule buildTreeAllReduce(const CollectiveShape& shape, const PipelineParams& pipeline) {
  if (shape.nranks == 1 || shape.bytes() == 0) return copyOnly(shape, "tree");
  // NCCL's double binary tree: the first half of the buffer goes up planned tree 0 and back down
  // it, the second half through tree 1, their chunks interleaved so that both trees run at once.
  // A host interior in one tree is a leaf in the other, which balances each rank's work.
  const std::array<TreePosition, 2> trees{shape.treePosition(0, shape.rank), shape.treePosition(1, shape.rank)};
  const size_t esize = shape.elementSize;
  const size_t chunkElements = chunkElementsFor(pipeline.chunkBytes, esize);
  const BlockLayout halves = BlockLayout::balanced(shape.count, 2, chunkElements);
  const size_t slotBytes = std::min(chunkElements, shape.count) * esize;
  ScratchSlots recvSlots(slotBytes, 2 * static_cast<size_t>(pipeline.slots));
  // A large call out of place streams its output, as the ring does (schedules.h): partials and
  // sums stay in scratch, are sent on from there, and reach the output with streaming stores;
  // a leaf, and a chain's middle rank, receive the sum straight into the output with them
  // (the middle rank passing it on in the same pass). Otherwise partials and sums
  // live in the output, which the sum coming down overwrites.
  const bool stream = !shape.inPlace && shape.bytes() >= pipeline.streamingMinBytes;
  // A chunk comes down `lag` chunks after it went up (see below), and at the root its sum waits
  // for that in scratch: a slot per half for each chunk in flight, and one each for partials on
  // their way up and sums on their way down; for deep trees at most 8 chunks' worth (30 slots),
  // beyond which a slot's reuse waits for its last use to finish.
  const size_t chunks = std::max(halves.chunks(0), halves.chunks(1));
  const size_t lag = std::min(chunks, 2 * static_cast<size_t>(std::max(1, shape.rankOrder().treeDepth(shape.nranks))));
  ScratchSlots sums(slotBytes, stream ? 3 * (std::min<size_t>(lag, 8) + 2) : 0, recvSlots.capacity());
  ScheduleBuilder b(shape.inPlace);
  // A connection delivers in the order steps were emitted, so a rank's sends go in the order
  // its peer receives them, and the two trees share every connection (on one host they chain
  // the ranks in opposite directions). Were a chunk's down emitted right after its up, the
  // next chunk's up would queue behind the round trip to the root and back: the trees would
  // take turns, not pipeline (a 2-rank tree measured 1.4x the ring; 8 ranks 2x). So a chunk
  // comes down `lag` chunks later, about the round trip's hops; and up both trees, leaves
  // first, so that the input a rank sends up one tree is not held behind its work in the other.
  auto forEachHalf = [&](size_t c, auto&& step) {
    for (int half = 0; half < 2; ++half) {
      if (c >= halves.chunks(half)) continue;
      step(half, trees[static_cast<size_t>(half)], halves.chunkElements(half, c), halves.chunkBegin(half, c) * esize);
    }
  };
  std::vector<std::array<Region, 2>> total(chunks);  // where each chunk's sums are, at a root
  auto up = [&](size_t c) {
    for (bool leaves : {true, false}) {
      forEachHalf(c, [&](int half, const TreePosition& pos, size_t elements, size_t offset) {
        if (pos.children.empty() != leaves) return;
        // Each interior rank accumulates its subtree's partial.
        const Region acc = stream ? sums.next() : Region{Buffer::Recv, offset};
        total[c][static_cast<size_t>(half)] = treeReduceChunk(b, shape, pos, recvSlots, {Buffer::Send, offset}, acc, elements);
        if (pos.parent < 0 && shape.average) b.divide(acc, elements, esize);
      });
    }
  };
  // The root's total replaces every partial.
  auto down = [&](size_t c) {
    forEachHalf(c, [&](int half, const TreePosition& pos, size_t elements, size_t offset) {
      const Region output{Buffer::Recv, offset};
      const size_t bytes = elements * esize;
      // A rank passes what comes down on to its children, to the first in the receiving step.
      auto receiveAndPassOn = [&](Region into) {
        if (pos.children.empty()) {
          b.recv(pos.parent, into, bytes);
          return;
        }
        recvAndSend(b, shape, pos.parent, into, bytes, pos.children[0]);
        for (size_t i = 1; i < pos.children.size(); ++i) b.send(pos.children[i], into, bytes);
      };
      if (!stream) {
        if (pos.parent >= 0) {
          receiveAndPassOn(output);
        } else {
          for (int child : pos.children) b.send(child, output, bytes);
        }
        return;
      }
      if (pos.children.empty()) {
        b.recv(pos.parent, output, bytes, true);
        return;
      }
      if (pos.parent >= 0 && pos.children.size() == 1 && shape.forward) {
        // A chain's link, as the ring's all-gather: the sum goes into the output around the
        // caches and into the child's slot in one pass. Through scratch it would be written
        // there and read back for the output, a pass more (8 ranks on 2 CPUs: 1.3-1.7x the
        // time in place).
        b.forwardSend(b.recvForward(pos.parent, pos.children[0], output, nullptr, bytes, esize, true, true));
        return;
      }
      Region sum = total[c][static_cast<size_t>(half)];
      if (pos.parent >= 0) {
        sum = sums.next();
        receiveAndPassOn(sum);
      } else {
        for (int child : pos.children) b.send(child, sum, bytes);
      }
      b.copy(output, sum, bytes, true);
    });
  };
  for (size_t c = 0; c < chunks + lag; ++c) {
    if (c < chunks) up(c);
    if (c >= lag) down(c - lag);
  }
  return b.finish("tree", stream ? sums.end() : recvSlots.end());
}

}  // namespace weft::coll
