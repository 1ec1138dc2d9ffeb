// Which buffers a rank uses in a call, how large they are, and the one overlap NCCL allows.
#pragma once

#include <cstddef>
#include <span>

#include "core/collective_call.h"
#include "util/status.h"

namespace weft::api {

struct BufferUse {
  bool send = true, recv = true;
  size_t sendBytes = 0, recvBytes = 0;
  ptrdiff_t inPlaceOffset = 0;  // recv + offset == send is in place (only with both used)
  const char* inPlaceForm = "sendbuff == recvbuff";  // the same, as the error text puts it
};

// The call's type must be valid and count * its size must not overflow (checked before); an
// error when count x nranks would.
Result<BufferUse> bufferUse(const char* fn, const core::CollectiveCall& call, int rank, int nranks);

// The calls of one group (each already checked alone) must not share memory where one writes:
// the group runs them side by side, so a receive into another call's buffer would race with it
// (NCCL leaves it undefined). Reads may share. weftInvalidArgument naming the two calls if they do.
Status checkGroupOverlaps(std::span<const core::CollectiveCall> calls, int rank, int nranks);

}  // namespace weft::api
