// The unique id: the bootstrap root's address plus a 32-byte random secret, packed into the
// 128 opaque bytes of weftUniqueId with a magic, a version and a checksum so that a corrupted
// or foreign id is refused with a clear error.
#pragma once

#include <array>
#include <cstdint>

#include "transport/socket/socket_util.h"
#include "weft/weft.h"

namespace weft::core {

using Secret = std::array<uint8_t, 32>;

struct UniqueIdContents {
  transport::SocketAddress root;
  Secret secret{};
  // Not encoded: set from the launcher's environment where it says the job spans hosts. A rank
  // whose route to the root is then loopback (the root's name means this host's loopback here)
  // listens for peers on an interface the other hosts can reach.
  bool spansHosts = false;
};

void encodeUniqueId(const UniqueIdContents& contents, weftUniqueId* id);
Result<UniqueIdContents> decodeUniqueId(const weftUniqueId& id);

// Bytes from the operating system's CSPRNG.
Status randomBytes(void* out, size_t bytes);
Result<Secret> newSecret();

uint64_t fnv1a64(const void* data, size_t bytes, uint64_t seed = 0xcbf29ce484222325ull);

}  // namespace weft::core
