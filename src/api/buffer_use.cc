#include "api/buffer_use.h"

#include <cstdint>

#include "kernels/cpu/reduce.h"

namespace weft::api {

using coll::Collective;

Result<BufferUse> bufferUse(const char* fn, const core::CollectiveCall& call, int rank, int nranks) {
  BufferUse use;
  const size_t elementSize = kernels::dataTypeSize(call.type);
  const auto n = static_cast<size_t>(nranks);
  const size_t bytes = call.count * elementSize;
  const bool blocked = call.collective == Collective::AllGather || call.collective == Collective::ReduceScatter ||
                       call.collective == Collective::AlltoAll || call.collective == Collective::Gather ||
                       call.collective == Collective::Scatter;
  if (blocked && call.count > SIZE_MAX / elementSize / n) {
    return Status(weftInvalidArgument, formatString("%s: count %zu x %d ranks of %s overflows the address space", fn,
                                                    call.count, nranks, kernels::dataTypeName(call.type)));
  }
  const size_t all = bytes * n;
  const bool root = rank == call.root;
  const auto myBlock = static_cast<ptrdiff_t>(bytes * static_cast<size_t>(rank));
  const char* inRecv = "sendbuff == recvbuff + rank * count";  // the rank's block of the output
  const char* inSend = "recvbuff == sendbuff + rank * count";  // the rank's block of the input
  switch (call.collective) {
    case Collective::AllReduce: use.sendBytes = use.recvBytes = bytes; break;
    case Collective::Broadcast: use.send = root; use.sendBytes = use.recvBytes = bytes; break;
    case Collective::Reduce: use.recv = root; use.sendBytes = use.recvBytes = bytes; break;
    case Collective::AllGather:
      use.sendBytes = bytes; use.recvBytes = all; use.inPlaceOffset = myBlock; use.inPlaceForm = inRecv; break;
    case Collective::ReduceScatter:
      use.sendBytes = all; use.recvBytes = bytes; use.inPlaceOffset = -myBlock; use.inPlaceForm = inSend; break;
    case Collective::AlltoAll: use.sendBytes = use.recvBytes = all; break;
    case Collective::Gather:
      use.recv = root; use.sendBytes = bytes; use.recvBytes = all; use.inPlaceOffset = myBlock;
      use.inPlaceForm = inRecv; break;
    case Collective::Scatter:
      use.send = root; use.sendBytes = all; use.recvBytes = bytes; use.inPlaceOffset = -myBlock;
      use.inPlaceForm = inSend; break;
    case Collective::Send: use.recv = false; use.sendBytes = bytes; break;
    case Collective::Recv: use.send = false; use.recvBytes = bytes; break;
  }
  return use;
}

}  // namespace weft::api
