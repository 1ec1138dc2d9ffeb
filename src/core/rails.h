// Rails: a host's NICs used side by side, as NCCL uses one NIC per channel. Each rank listens on
// the network interface of each of its host's NICs (in the topology's NIC order) and tells the
// others where, through the bootstrap. A pair of ranks on different hosts then opens a socket
// stream per channel from the rank's NIC of that channel to the peer's, so a message striped
// over the pair's streams (transport/socket/socket_connection.h) crosses every rail at once.
#pragma once

#include <array>
#include <utility>
#include <vector>

#include "plan/planner.h"
#include "topo/topology.h"
#include "transport/socket/socket_util.h"

namespace weft::core {

constexpr int kMaxRails = plan::kMaxChannels;  // a rail per channel
// A rank's listening address per NIC of its host; length 0 where that NIC has none.
using RailAddresses = std::array<transport::SocketAddress, kMaxRails>;

struct RailListeners {
  RailAddresses addresses;
  std::vector<transport::UniqueFd> fds;  // the listeners besides `primary`'s
};

// Listens on the address of each NIC's network interface (of `primary`'s family, and allowed by
// WEFT_SOCKET_IFNAME when that is set). A NIC whose interface holds `primary` (the rank's main
// listener) shares that listener. A NIC without a usable interface gets no rail, with a line at
// WEFT_DEBUG=INFO: its channel's streams then take the main address.
Result<RailListeners> listenOnRails(const topo::HostTopology& host, const transport::SocketAddress& primary);

// How one stream of a pair is routed: from `source` (nullptr: wherever the kernel routes) to
// `destination`, and which NICs those are for messages (-1: the rank's main address).
struct StreamRoute {
  transport::SocketAddress destination;
  const transport::SocketAddress* source = nullptr;
  int localNic = -1;
  int peerNic = -1;
};

// The streams between this rank and a peer: `streamsPerPeer` of them to the peer's main address,
// or, between hosts in a plan with several channels, a multiple of the channel count with
// stream s on channel s % channels, between the two ranks' NICs of that channel where both have
// a rail. `channelNics` is plan::channelNics(...) for the pair. Both ranks compute the same count.
std::vector<StreamRoute> streamRoutes(const std::vector<std::pair<int, int>>& channelNics, int streamsPerPeer,
                                      const RailAddresses& mine, const transport::SocketAddress& peerMain,
                                      const RailAddresses& peers);
int streamCount(const std::vector<std::pair<int, int>>& channelNics, int streamsPerPeer);

}  // namespace weft::core
