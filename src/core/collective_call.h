// One collective or point-to-point call as the C API received it, after argument checks.
#pragma once

#include <array>
#include <cstddef>

#include "coll/collective.h"
#include "kernels/cpu/reduce.h"
#include "transport/transport.h"
#include "weft/weft.h"

namespace weft::core {

struct CollectiveCall {
  coll::Collective collective = coll::Collective::AllReduce;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;  // as CollectiveShape::count
  weftDataType_t type = weftFloat32;
  weftRedOp_t op = weftSum;  // a built-in operator; PreMulSum is Sum after the scaling below
  int root = 0;              // or the peer of a send / recv
  // PreMulSum: every input is multiplied by a scalar of `type` before the sum. The scalar is
  // scalarValue (host-immediate, copied when the call was made) or read from *scalarAt when
  // the call runs (NCCL's "device" residence, here any memory the caller keeps valid).
  bool preMulSum = false;
  std::array<unsigned char, 8> scalarValue{};
  const void* scalarAt = nullptr;
};

// Avg over a narrow float type divides each rank's input by the rank count first (in float,
// rounding once), then sums, as NCCL does: summed first, the inputs would saturate (fp8) or
// overflow (half) where their average fits. Other types sum, then divide, which rounds once
// (float, double) or truncates (integers, as NCCL).
inline bool dividesInputs(const CollectiveCall& call) {
  return call.op == weftAvg && kernels::isNarrowFloat(call.type);
}

inline bool isPointToPoint(const CollectiveCall& call) {
  return call.collective == coll::Collective::Send || call.collective == coll::Collective::Recv;
}

// count x the type's size: one rank's block for the blocked collectives.
inline size_t callBytes(const CollectiveCall& call) { return call.count * kernels::dataTypeSize(call.type); }

// Bytes of the send buffer: n blocks for reduce-scatter, scatter and alltoall, else one.
inline size_t inputBytes(const CollectiveCall& call, int nranks) {
  switch (call.collective) {
    case coll::Collective::ReduceScatter:
    case coll::Collective::Scatter:
    case coll::Collective::AlltoAll: return callBytes(call) * static_cast<size_t>(nranks);
    default: return callBytes(call);
  }
}

// A digest of what every rank of one call agrees on, so that a rank in a different call (or the
// same collective with another count, type, operator or root) is caught at its first message.
// A multiply-xorshift mix, inline: it runs on every call's latency path.
inline transport::MessageTag messageTag(const CollectiveCall& call) {
  const bool p2p = isPointToPoint(call);
  const uint64_t fields[] = {p2p ? 0xffu : static_cast<uint64_t>(call.collective), call.count,
                             static_cast<uint64_t>(call.type),
                             coll::isReducing(call.collective) ? static_cast<uint64_t>(call.op) | uint64_t{call.preMulSum} << 8 : 0,
                             p2p ? 0 : static_cast<uint64_t>(call.root)};
  uint64_t hash = 0x9e3779b97f4a7c15ull;
  for (uint64_t field : fields) {
    hash = (hash ^ field) * 0xbf58476d1ce4e5b9ull;
    hash ^= hash >> 31;
  }
  return static_cast<transport::MessageTag>(hash ^ (hash >> 32));
}

}  // namespace weft::core
