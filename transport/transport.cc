#include "transport/transport.h"

namespace weft::transport {

Status tagMismatch(int peerRank, const std::string& peerName, MessageTag expected, MessageTag got) {
  return Status(weftInvalidUsage,
                formatString("mismatched calls with rank %d (%s): its message belongs to a call with signature %08x, "
                             "this rank's to %08x (do all ranks issue the same collectives, with the same counts, "
                             "types, operators and roots, in the same order?)",
                             peerRank, peerName.c_str(), static_cast<unsigned>(got), static_cast<unsigned>(expected)));
}

}  // namespace weft::transport
