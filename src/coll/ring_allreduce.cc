#include <algorithm>
#include <cstdint>
#include <vector>

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
  const size_t slotBytes = std::min(chunkElements, std::max<size_t>(largestBlock, 1)) * esize;
  // In place, a partial sum overwrites the input it was summed from, whose lines are in cache
  // already. Out of place it goes to scratch rather than to the output, which a partial would
  // first have to read in (and the all-gather overwrites): there it lives from its step to the
  // next, one diagonal later, while at most n-2 others are written, so with n slots or more
  // none is overwritten before it is sent on. (Over connections that reduce on receipt nothing
  // is received into scratch first.)
  ScratchSlots slots(slotBytes, static_cast<size_t>(pipeline.slots));
  ScratchSlots partials(slotBytes, std::max(2 * static_cast<size_t>(pipeline.slots), static_cast<size_t>(n)),
                        shape.recvReduce ? 0 : slots.capacity());
  // A large call out of place streams its output (schedules.h): the full sums go to scratch, on
  // to the next rank from there, and into the output with streaming stores, as do the chunks
  // the all-gather's last step receives, and where forwarding passes the all-gather's other
  // chunks on from the slot, those too (a piece that falls back is sent on from the output,
  // read back from memory once, where a cached store would have read the line in first).
  const bool stream = !shape.inPlace && shape.bytes() >= pipeline.streamingMinBytes;
  size_t chunks = 0;
  for (int blk = 0; blk < n; ++blk) chunks = std::max(chunks, layout.chunks(blk));
  std::vector<Region> received(chunks);  // where each chunk received on the last step is
  // Over connections that forward (shared memory), the step that receives a chunk also sends it
  // on at the next step, straight into the next rank's slot: a partial sum is never written to
  // scratch and read back, a full sum and an all-gathered chunk reach the output and the next
  // slot in one pass. Not the full sum of an average, which is divided before it goes on.
  std::vector<uint32_t> forwarding(chunks, ScheduleBuilder::kNoStep);  // per chunk: the step the next send is

  // 2(n-1) steps: reduce-scatter for t < n-1 (after them this rank holds the full reduction of
  // block r+1), then all-gather, passing the reduced blocks around the ring. At step t a rank
  // sends block r-t chunk by chunk and receives block r-t-1, which it sends on at step t+1;
  // chunks go in forEachStepByDiagonal's order.
  auto emit = [&](int t, size_t c) {
    const int sending = block(r - t);
    const int receiving = block(r - t - 1);
    if (c < layout.chunks(sending)) {
      b.sendOn(forwarding[c], next, t == 0 ? at(Buffer::Send, sending, c) : received[c],
               layout.chunkElements(sending, c) * esize);
    }
    forwarding[c] = ScheduleBuilder::kNoStep;
    if (c >= layout.chunks(receiving)) return;
    const size_t elements = layout.chunkElements(receiving, c);
    const Region output = at(Buffer::Recv, receiving, c);
    if (t == 2 * n - 3) {
      b.recv(prev, output, elements * esize, stream);
      return;
    }
    if (t >= n - 1) {
      if (shape.forward) {
        forwarding[c] = b.recvForward(prev, next, output, nullptr, elements * esize, esize, true, stream);
      } else {
        b.recv(prev, output, elements * esize);
      }
      received[c] = output;
      return;
    }
    const bool full = t == n - 2;
    const Region local = at(Buffer::Send, receiving, c);
    if (shape.forward && shape.recvReduce && !(full && shape.average)) {
      // A partial sum lands nowhere when it goes straight on (where it cannot, in scratch, or
      // in place in its input); a full sum lands in the output, streamed there when large.
      const Region sum = full || shape.inPlace ? output : partials.next();
      forwarding[c] = b.recvForward(prev, next, sum, &local, elements * esize, esize, full, full && stream);
      received[c] = sum;
      return;
    }
    const bool intoOutput = full ? !stream : shape.inPlace;
    const Region sum = intoOutput ? output : partials.next();
    if (shape.recvReduce) {
      b.recvReduce(prev, sum, local, elements, esize);
    } else {
      const Region slot = slots.next();
      b.recv(prev, slot, elements * esize);
      b.reduce(sum, local, slot, elements, esize);
    }
    if (full && shape.average) b.divide(sum, elements, esize);
    if (full && stream) b.copy(output, sum, elements * esize, true);
    received[c] = sum;
  };
  forEachStepByDiagonal(2 * (n - 1), chunks, emit);
  return b.finish("ring", std::max(partials.end(), slots.end()));
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
  // Whether to stream the output is the whole call's affair, not each share's.
  PipelineParams shares = pipeline;
  shares.streamingMinBytes = shape.bytes() >= pipeline.streamingMinBytes ? 0 : SIZE_MAX;
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
    parts.push_back(buildOneRing(part, shares));
    offsets.push_back(begin * shape.elementSize);
  }
  Schedule out = concatenateParts(parts, offsets);
  out.channels = static_cast<int>(channels);
  return out;
}

}  // namespace weft::coll
