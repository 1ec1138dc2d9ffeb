#include "coll/schedules.h"
#include "coll/schedule_builder.h"

namespace weft::coll {

Schedule buildRecursiveDoublingAllReduce(const CollectiveShape& shape) {
  const int n = shape.nranks;
  const int r = shape.rank;
  const size_t bytes = shape.count * shape.elementSize;
  ScheduleBuilder b(shape.inPlace);
  const Region send{Buffer::Send, 0};
  const Region recv{Buffer::Recv, 0};
  const Region scratch{Buffer::Scratch, 0};
  if (bytes == 0) return b.finish("recursive-doubling", 0);

  int pow2 = 1;
  while (pow2 * 2 <= n) pow2 *= 2;
  const int extra = n - pow2;
  // The first 2*extra ranks pair up: the even one hands its data to the odd one and sits out.
  auto realRank = [extra](int virtualRank) { return virtualRank < extra ? 2 * virtualRank + 1 : virtualRank + extra; };

  if (r < 2 * extra && r % 2 == 0) {
    b.send(r + 1, send, bytes);
    b.recv(r + 1, recv, bytes);
    return b.finish("recursive-doubling", 0);
  }
  int virtualRank;
  if (r < 2 * extra) {
    b.recv(r - 1, scratch, bytes);
    b.reduce(recv, scratch, send, shape.count, shape.elementSize);  // lower rank's data first
    virtualRank = r / 2;
  } else {
    if (!shape.inPlace) b.copy(recv, send, bytes);
    virtualRank = r - extra;
  }
  for (int mask = 1; mask < pow2; mask <<= 1) {
    const int partner = realRank(virtualRank ^ mask);
    b.send(partner, recv, bytes);
    b.recv(partner, scratch, bytes);
    // Both partners add the lower half's partial first, so every rank ends bit-identical.
    if (partner < r) {
      b.reduce(recv, scratch, recv, shape.count, shape.elementSize);
    } else {
      b.reduce(recv, recv, scratch, shape.count, shape.elementSize);
    }
  }
  if (shape.average) b.divide(recv, shape.count, shape.elementSize);
  if (r < 2 * extra) b.send(r - 1, recv, bytes);
  return b.finish("recursive-doubling", bytes);
}

}  // namespace weft::coll
