// Which buffers a rank uses in a call, how large they are, and the one overlap NCCL allows.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <utility>

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

// For a host call of at least kMappedCheckBytes: an error where a buffer's first or last byte is
// not mapped memory in this process, the usual sign of a count larger than the buffer (which
// would otherwise fault mid-call, or plan a schedule for terabytes). Two bytes read by
// process_vm_readv, a microsecond against the tens a call of that size takes.
constexpr size_t kMappedCheckBytes = size_t{1} << 20;
Status checkHostBuffersMapped(const char* fn, const core::CollectiveCall& call, const BufferUse& use);

// A call of a group as the rank that makes it sees it.
struct RankedCall {
  core::CollectiveCall call;
  int rank = 0, nranks = 1;  // in the call's communicator
};

// The calls of one group (each already checked alone), on any communicators, run side by side:
// none may write memory another reads or writes (NCCL leaves it undefined); reads may share.
// The first two calls (indexes, lower first) that do, if any.
std::optional<std::pair<size_t, size_t>> firstWriteOverlap(std::span<const RankedCall> calls);

}  // namespace weft::api
