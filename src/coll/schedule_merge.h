// A group's operations as one schedule, so that they run together: operation i's send and
// receive buffers become Buffer::send(i) and Buffer::recv(i), its scratch moves past the
// scratch of the operations before it, and its steps serve operation i. Each peer's sends and
// receives keep operation order, so ranks that issue matching operations in the same order
// pair up, and no operation waits on a later one: paired sends and receives never deadlock.
#pragma once

#include <vector>

#include "coll/schedule.h"

namespace weft::coll {

Schedule mergeSchedules(const std::vector<const Schedule*>& parts);

// One operation's schedules over parts of its buffers, as one: part i's send and receive
// regions move `byteOffsets[i]` into the buffers and its scratch past the parts' before it.
// Each peer's messages keep part order (all of part 0's, then part 1's), the same on every
// rank, so the n-th send still meets the n-th receive; parts with different peers run at once.
Schedule concatenateParts(const std::vector<Schedule>& parts, const std::vector<size_t>& byteOffsets);

}  // namespace weft::coll
