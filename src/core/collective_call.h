// One collective or point-to-point call as the C API received it, after argument checks.
#pragma once

#include <array>
#include <cstddef>

#include "coll/collective.h"
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

}  // namespace weft::core
