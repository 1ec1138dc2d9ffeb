#include "core/rails.h"

#include "transport/socket/interface_select.h"
#include "util/env.h"
#include "util/log.h"

namespace weft::core {

using transport::SocketAddress;

namespace {

// By the printed address, so that padding and IPv6 flow labels do not count.
bool sameIp(SocketAddress a, SocketAddress b) {
  a.setPort(0);
  b.setPort(0);
  return a.toString() == b.toString();
}

}  // namespace

Result<RailListeners> listenOnRails(const topo::HostTopology& host, const SocketAddress& primary) {
  RailListeners out;
  const int fabric = host.fabricNicCount();
  if (fabric < 2) return out;  // one NIC: the main listener is all there is
  WEFT_ASSIGN_OR_RETURN(auto interfaces, transport::listInterfaces());
  const auto spec = envString("WEFT_SOCKET_IFNAME");
  const auto filter = transport::InterfaceFilter::parse(spec.value_or(""));
  for (size_t nic = 0; nic < static_cast<size_t>(fabric) && nic < kMaxRails; ++nic) {
    const std::string& netdev = host.nics[nic].netdev;
    const transport::NetworkInterface* match = nullptr;
    for (const auto& itf : interfaces) {
      if (!netdev.empty() && itf.name == netdev && itf.address.family() == primary.family() &&
          (!spec || filter.matches(itf.name))) {
        match = &itf;
        break;
      }
    }
    if (match == nullptr) {
      WEFT_INFO("NIC %zu (%s): no %s interface%s to listen on; its channel uses the main address", nic,
                host.nics[nic].name.c_str(), netdev.empty() ? "network" : ("\"" + netdev + "\"").c_str(),
                spec ? " that WEFT_SOCKET_IFNAME allows" : "");
      continue;
    }
    if (sameIp(match->address, primary)) {
      out.addresses[nic] = primary;
      continue;
    }
    SocketAddress bound;
    auto fd = transport::listenOn(match->address, &bound);
    if (!fd.isOk()) {
      WEFT_WARN("NIC %zu (%s): cannot listen on %s (%s); its channel uses the main address", nic, netdev.c_str(),
                match->address.toString().c_str(), fd.status().message().c_str());
      continue;
    }
    out.addresses[nic] = bound;
    out.fds.push_back(fd.take());
  }
  return out;
}

int streamCount(const std::vector<std::pair<int, int>>& channelNics, int streamsPerPeer) {
  const int channels = static_cast<int>(channelNics.size());
  if (channels < 2) return streamsPerPeer;
  return (streamsPerPeer + channels - 1) / channels * channels;
}

std::vector<StreamRoute> streamRoutes(const std::vector<std::pair<int, int>>& channelNics, int streamsPerPeer,
                                      const RailAddresses& mine, const SocketAddress& peerMain,
                                      const RailAddresses& peers) {
  const int count = streamCount(channelNics, streamsPerPeer);
  std::vector<StreamRoute> routes(static_cast<size_t>(count), StreamRoute{peerMain});
  if (channelNics.size() < 2) return routes;
  auto rail = [](const RailAddresses& rails, int nic) -> const SocketAddress* {
    return nic >= 0 && nic < kMaxRails && rails[static_cast<size_t>(nic)].length > 0 ? &rails[static_cast<size_t>(nic)] : nullptr;
  };
  for (int s = 0; s < count; ++s) {
    const auto [localNic, peerNic] = channelNics[static_cast<size_t>(s) % channelNics.size()];
    const SocketAddress* from = rail(mine, localNic);
    const SocketAddress* to = rail(peers, peerNic);
    if (from == nullptr || to == nullptr) continue;
    routes[static_cast<size_t>(s)] = {*to, from, localNic, peerNic};
  }
  return routes;
}

}  // namespace weft::core
