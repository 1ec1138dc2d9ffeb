// Which connection makes room when a listener's table of connections that have not said hello
// is full (the bootstrap root's, a rank's peer mesh): the oldest one from the source host that
// holds the most. One host flooding the port then evicts only its own connections, and a real
// rank's connection, from a host that holds few, keeps its place. A flood from as many hosts as
// the table has places can still evict it; the secret keeps every one of them out regardless.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <vector>

#include "transport/socket/socket_util.h"

namespace weft::core {

// The address without its port: family and address bytes.
inline std::array<uint8_t, 18> sourceHostOf(const transport::SocketAddress& address) {
  transport::WireAddress wire = transport::toWire(address);
  std::array<uint8_t, 18> key{};
  std::memcpy(key.data(), &wire.family, sizeof(wire.family));
  std::memcpy(key.data() + sizeof(wire.family), wire.addr, sizeof(wire.addr));
  return key;
}

// The index in `pending` (oldest first; each element has a SocketAddress `from`) of the
// connection to drop. `pending` must not be empty.
template <typename Pending>
size_t connectionToEvict(const std::vector<Pending>& pending) {
  std::map<std::array<uint8_t, 18>, size_t> perHost;
  size_t most = 0;
  for (const Pending& p : pending) most = std::max(most, ++perHost[sourceHostOf(p.from)]);
  for (size_t i = 0; i < pending.size(); ++i) {
    if (perHost[sourceHostOf(pending[i].from)] == most) return i;
  }
  return 0;
}

}  // namespace weft::core
