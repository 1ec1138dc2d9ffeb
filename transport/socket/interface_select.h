// Choosing the network interface to listen on, with WEFT_SOCKET_IFNAME in NCCL's syntax:
// "eth,ib" (prefixes), "^docker" (exclude prefixes), "=eth0" (exact names), "^=eth0".
#pragma once

#include <string>
#include <vector>

#include "transport/socket/socket_util.h"

namespace weft::transport {

class InterfaceFilter {
 public:
  static InterfaceFilter parse(const std::string& spec);
  bool matches(const std::string& name) const;

 private:
  bool exclude_ = false;
  bool exact_ = false;
  std::vector<std::string> names_;
};

struct NetworkInterface {
  std::string name;
  SocketAddress address;  // port 0
};

// Interfaces that are up and have an IPv4 or global IPv6 address, in the kernel's order.
Result<std::vector<NetworkInterface>> listInterfaces();

// WEFT_SOCKET_IFNAME's first match, loopback only when nothing else matches (an exclusion such
// as ^docker allows lo too); otherwise the first interface that is not loopback or a container
// bridge, falling back to loopback.
Result<NetworkInterface> chooseInterface();

// The address this rank listens on for peers: WEFT_SOCKET_IFNAME's choice when set, otherwise
// the local address that routes to the bootstrap root, unless that is loopback in a job that
// spans hosts (the root's name is loopback on this host only): then chooseInterface's.
Result<SocketAddress> chooseListenAddress(const SocketAddress& root, bool spansHosts);

}  // namespace weft::transport
