// How schedules cut buffers: into one block per rank, each block into pipeline chunks, and
// scratch memory into slots reused round-robin (the builder's hazard tracking orders reuse).
#pragma once

#include <algorithm>
#include <cstddef>

#include "coll/schedule.h"

namespace weft::coll {

class BlockLayout {
 public:
  // `count` elements in nranks blocks whose sizes differ by at most one (all-reduce).
  static BlockLayout balanced(size_t count, int nranks, size_t chunkElements) {
    return BlockLayout(count, static_cast<size_t>(nranks), 0, chunkElements);
  }
  // nranks blocks of `perBlock` elements each (all-gather, reduce-scatter).
  static BlockLayout uniform(size_t perBlock, int nranks, size_t chunkElements) {
    return BlockLayout(perBlock * static_cast<size_t>(nranks), static_cast<size_t>(nranks), perBlock, chunkElements);
  }

  size_t blockBegin(int block) const {
    return perBlock_ ? perBlock_ * static_cast<size_t>(block) : count_ * static_cast<size_t>(block) / nranks_;
  }
  size_t blockEnd(int block) const { return blockBegin(block + 1); }
  size_t chunks(int block) const { return (blockEnd(block) - blockBegin(block) + chunkElements_ - 1) / chunkElements_; }
  size_t chunkBegin(int block, size_t chunk) const { return blockBegin(block) + chunk * chunkElements_; }
  size_t chunkElements(int block, size_t chunk) const {
    return std::min(chunkElements_, blockEnd(block) - chunkBegin(block, chunk));
  }

 private:
  BlockLayout(size_t count, size_t nranks, size_t perBlock, size_t chunkElements)
      : count_(count), nranks_(nranks), perBlock_(perBlock), chunkElements_(std::max<size_t>(1, chunkElements)) {}

  size_t count_;
  size_t nranks_;
  size_t perBlock_;  // 0: balanced
  size_t chunkElements_;
};

// The order a ring's pipelined steps are issued in: step t of chunk c on diagonal t + c, the
// earliest step first within a diagonal. A rank then passes each chunk on as soon as it has it
// (while it is still in cache) rather than after its whole block, and the ring is as many steps
// deep in chunks as it has steps, as NCCL's. A send of step t+1 reads what step t received on
// the diagonal before, so no send waits in the transport's in-order queue behind a chunk that
// has not arrived: step 0 of the next chunk comes first.
template <typename Emit>
void forEachStepByDiagonal(int steps, size_t chunks, Emit&& emit) {
  const size_t depth = static_cast<size_t>(std::max(steps, 0));
  for (size_t diagonal = 0; diagonal + 1 < chunks + depth; ++diagonal) {
    for (size_t t = 0; t < depth && t <= diagonal; ++t) {
      if (diagonal - t < chunks) emit(static_cast<int>(t), diagonal - t);
    }
  }
}

// `slots` scratch regions of slotBytes each, handed out round-robin from `base`.
class ScratchSlots {
 public:
  ScratchSlots(size_t slotBytes, size_t slots, size_t base = 0)
      : slotBytes_((slotBytes + 63) / 64 * 64), slots_(std::max<size_t>(1, slots)), base_(base) {}

  Region next() { return {Buffer::Scratch, base_ + (used_++ % slots_) * slotBytes_}; }
  // Scratch bytes the slots handed out so far reach, from offset 0.
  size_t end() const { return base_ + std::min(used_, slots_) * slotBytes_; }
  // Where the last slot ends, used or not: the base for another set of slots.
  size_t capacity() const { return base_ + slots_ * slotBytes_; }

 private:
  size_t slotBytes_;
  size_t slots_;
  size_t base_;
  size_t used_ = 0;
};

// Elements per pipeline chunk for a chunk size in bytes.
inline size_t chunkElementsFor(size_t chunkBytes, size_t elementSize) {
  return std::max<size_t>(1, chunkBytes / elementSize);
}

}  // namespace weft::coll
