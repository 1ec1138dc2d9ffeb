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

}  // namespace weft::coll
