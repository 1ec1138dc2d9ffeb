// Which connection makes room when a listener's table of connections that have not said hello
// is full (the bootstrap root's, a rank's peer mesh): the oldest one from the source that holds
// the most, a source being an IPv4 address or an IPv6 /64 (what one site is given). One host
// flooding the port then evicts only its own connections, and a real rank's connection, from a
// host that holds few, keeps its place. A flood from as many sources as the table has places
// (many hosts, or one local user binding addresses all over 127/8) can still evict it; the
// secret keeps every one of them out regardless.
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

// The source of a connection: its family and its IPv4 address or IPv6 /64 (an IPv4 address
// mapped into IPv6 whole).
using ConnectionSource = std::array<uint8_t, 18>;
inline ConnectionSource sourceOf(const transport::SocketAddress& address) {
  transport::WireAddress wire = transport::toWire(address);
  static constexpr uint8_t kMappedPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (address.family() == AF_INET6 && std::memcmp(wire.addr, kMappedPrefix, sizeof(kMappedPrefix)) != 0) {
    std::memset(wire.addr + 8, 0, 8);
  }
  ConnectionSource key{};
  std::memcpy(key.data(), &wire.family, sizeof(wire.family));
  std::memcpy(key.data() + sizeof(wire.family), wire.addr, sizeof(wire.addr));
  return key;
}

// The index in `pending` (oldest first; each element has a SocketAddress `from`) of the
// connection to drop. `pending` must not be empty.
template <typename Pending>
size_t connectionToEvict(const std::vector<Pending>& pending) {
  std::vector<ConnectionSource> sources;
  sources.reserve(pending.size());
  std::map<ConnectionSource, size_t> perSource;
  size_t most = 0;
  for (const Pending& p : pending) {
    sources.push_back(sourceOf(p.from));
    most = std::max(most, ++perSource[sources.back()]);
  }
  for (size_t i = 0; i < sources.size(); ++i) {
    if (perSource[sources[i]] == most) return i;
  }
  return 0;
}

}  // namespace weft::core
