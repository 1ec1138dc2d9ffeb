// Personalized exchanges (alltoall, gather, scatter) and point-to-point: every block goes
// straight to the rank that needs it, in one round.
#include "coll/schedule_builder.h"
#include "coll/schedules.h"

namespace weft::coll {

Schedule buildAlltoAll(const CollectiveShape& shape) {
  const int n = shape.nranks, r = shape.rank;
  const size_t bytes = shape.bytes();
  ScheduleBuilder b(shape.inPlace);
  if (bytes == 0) return b.finish("direct", 0);
  auto block = [bytes](BufferId buffer, int rank) { return Region{buffer, static_cast<size_t>(rank) * bytes}; };
  if (!shape.inPlace) b.copy(block(Buffer::Recv, r), block(Buffer::Send, r), bytes);
  // Send to r+k while receiving from r-k, so that every rank's k-th exchange pairs up. All sends
  // come first in program order: in place, a block may be overwritten only after it has gone.
  for (int k = 1; k < n; ++k) b.send((r + k) % n, block(Buffer::Send, (r + k) % n), bytes);
  for (int k = 1; k < n; ++k) {
    const int from = (r + n - k) % n;
    if (shape.inPlace) {
      // The block arriving from `from` replaces the one going to it: land it aside first.
      const Region slot{Buffer::Scratch, static_cast<size_t>(k - 1) * bytes};
      b.recv(from, slot, bytes);
      b.copy(block(Buffer::Recv, from), slot, bytes);
    } else {
      b.recv(from, block(Buffer::Recv, from), bytes);
    }
  }
  return b.finish("direct", shape.inPlace ? static_cast<size_t>(n - 1) * bytes : 0);
}

Schedule buildGather(const CollectiveShape& shape) {
  const int n = shape.nranks, r = shape.rank;
  const size_t bytes = shape.bytes();
  ScheduleBuilder b(false);
  if (bytes == 0) return b.finish("direct", 0);
  if (r != shape.root) {
    b.send(shape.root, {Buffer::Send, 0}, bytes);
    return b.finish("direct", 0);
  }
  if (!shape.inPlace) b.copy({Buffer::Recv, static_cast<size_t>(r) * bytes}, {Buffer::Send, 0}, bytes);
  for (int k = 1; k < n; ++k) {
    const int peer = (r + k) % n;
    b.recv(peer, {Buffer::Recv, static_cast<size_t>(peer) * bytes}, bytes);
  }
  return b.finish("direct", 0);
}

Schedule buildScatter(const CollectiveShape& shape) {
  const int n = shape.nranks, r = shape.rank;
  const size_t bytes = shape.bytes();
  ScheduleBuilder b(false);
  if (bytes == 0) return b.finish("direct", 0);
  if (r != shape.root) {
    b.recv(shape.root, {Buffer::Recv, 0}, bytes);
    return b.finish("direct", 0);
  }
  for (int k = 1; k < n; ++k) {
    const int peer = (r + k) % n;
    b.send(peer, {Buffer::Send, static_cast<size_t>(peer) * bytes}, bytes);
  }
  if (!shape.inPlace) b.copy({Buffer::Recv, 0}, {Buffer::Send, static_cast<size_t>(r) * bytes}, bytes);
  return b.finish("direct", 0);
}

Schedule buildSend(const CollectiveShape& shape) {
  ScheduleBuilder b(false);
  if (shape.bytes() > 0) b.send(shape.root, {Buffer::Send, 0}, shape.bytes());
  return b.finish("direct", 0);
}

Schedule buildRecv(const CollectiveShape& shape) {
  ScheduleBuilder b(false);
  if (shape.bytes() > 0) b.recv(shape.root, {Buffer::Recv, 0}, shape.bytes());
  return b.finish("direct", 0);
}

}  // namespace weft::coll
