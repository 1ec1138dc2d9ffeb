#include "coll/schedules.h"
#include "coll/schedule_builder.h"

namespace weft::coll {

Schedule buildOneShotAllReduce(const CollectiveShape& shape) {
  const int n = shape.nranks;
  const int r = shape.rank;
  const size_t bytes = shape.count * shape.elementSize;
  ScheduleBuilder b(shape.inPlace);
  const Region send{Buffer::Send, 0};
  const Region recv{Buffer::Recv, 0};
  if (bytes == 0) return b.finish("one-shot", 0);
  if (n == 1) {
    if (!shape.inPlace) b.copy(recv, send, bytes);
    if (shape.average) b.divide(recv, shape.count, shape.elementSize);
    return b.finish("one-shot", 0);
  }
  // Every peer's input lands in its own scratch slot. In place, the first reduction overwrites
  // this rank's input before rank order reaches it (unless it is rank 0 or 1), so it is set
  // aside in one more slot.
  const bool keepOwnInput = shape.inPlace && r >= 2;
  auto input = [&](int rank) {
    if (rank == r && !keepOwnInput) return send;
    int slot = rank == r ? n - 1 : rank < r ? rank : rank - 1;
    return Region{Buffer::Scratch, static_cast<size_t>(slot) * bytes};
  };
  if (keepOwnInput) b.copy(input(r), send, bytes);
  // Start with the next rank so that the ranks do not all send to rank 0 first.
  for (int k = 1; k < n; ++k) {
    int peer = (r + k) % n;
    b.send(peer, send, bytes);
    b.recv(peer, input(peer), bytes);
  }
  // Reduce in rank order, the same on every rank, so that all ranks end bit-identical.
  b.reduce(recv, input(0), input(1), shape.count, shape.elementSize);
  for (int rank = 2; rank < n; ++rank) b.reduce(recv, recv, input(rank), shape.count, shape.elementSize);
  if (shape.average) b.divide(recv, shape.count, shape.elementSize);
  return b.finish("one-shot", static_cast<size_t>(keepOwnInput ? n : n - 1) * bytes);
}

}  // namespace weft::coll
