#include "transport/transport.h"

namespace weft::transport {

Status tagMismatch(int peerRank, const std::string& peerName, MessageTag expected, MessageTag got,
                   uint64_t expectedBytes, uint64_t gotBytes) {
  return Status(weftInvalidUsage,
                formatString("mismatched calls with rank %d (%s): its message (%llu bytes) belongs to a call with "
                             "signature %08x, this rank's (%llu bytes) to %08x (do all ranks issue the same "
                             "collectives, with the same counts, types, operators and roots, in the same order?)",
                             peerRank, peerName.c_str(), static_cast<unsigned long long>(gotBytes),
                             static_cast<unsigned>(got), static_cast<unsigned long long>(expectedBytes),
                             static_cast<unsigned>(expected)));
}

}  // namespace weft::transport
