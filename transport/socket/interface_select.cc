#include "transport/socket/interface_select.h"

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <algorithm>
#include <cerrno>

#include "util/env.h"
#include "util/log.h"

namespace weft::transport {

InterfaceFilter InterfaceFilter::parse(const std::string& spec) {
  InterfaceFilter filter;
  size_t pos = 0;
  if (pos < spec.size() && spec[pos] == '^') { filter.exclude_ = true; ++pos; }
  if (pos < spec.size() && spec[pos] == '=') { filter.exact_ = true; ++pos; }
  while (pos <= spec.size()) {
    size_t comma = spec.find(',', pos);
    if (comma == std::string::npos) comma = spec.size();
    std::string name = spec.substr(pos, comma - pos);
    // NCCL allows "eth0:port"; the port part is not used for choosing.
    if (size_t colon = name.find(':'); colon != std::string::npos) name.resize(colon);
    if (!name.empty()) filter.names_.push_back(name);
    pos = comma + 1;
  }
  return filter;
}

bool InterfaceFilter::matches(const std::string& name) const {
  bool listed = false;
  for (const auto& entry : names_) {
    listed = exact_ ? name == entry : name.compare(0, entry.size(), entry) == 0;
    if (listed) break;
  }
  return listed != exclude_;
}

Result<std::vector<NetworkInterface>> listInterfaces() {
  ifaddrs* all = nullptr;
  if (::getifaddrs(&all) != 0) return Status(weftSystemError, "getifaddrs: " + errnoString(errno));
  std::vector<NetworkInterface> out;
  for (ifaddrs* ifa = all; ifa != nullptr; ifa = ifa->ifa_next) {
    if (ifa->ifa_addr == nullptr || !(ifa->ifa_flags & IFF_UP)) continue;
    int family = ifa->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    if (family == AF_INET6) {
      auto* in6 = reinterpret_cast<sockaddr_in6*>(ifa->ifa_addr);
      if (IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr)) continue;
    }
    socklen_t len = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    auto address = SocketAddress::fromSockaddr(ifa->ifa_addr, len);
    if (!address.isOk()) continue;
    address.value().setPort(0);
    out.push_back({ifa->ifa_name, address.value()});
  }
  ::freeifaddrs(all);
  return out;
}

Result<NetworkInterface> chooseInterface() {
  WEFT_ASSIGN_OR_RETURN(auto interfaces, listInterfaces());
  if (auto spec = envString("WEFT_SOCKET_IFNAME")) {
    InterfaceFilter filter = InterfaceFilter::parse(*spec);
    // Loopback only where nothing else matches: `^docker` means "not docker", not "lo", which
    // most machines list first and no other host can reach.
    for (bool loopback : {false, true}) {
      for (int family : {AF_INET, AF_INET6}) {
        for (const auto& itf : interfaces) {
          if (itf.address.family() == family && itf.address.isLoopback() == loopback && filter.matches(itf.name)) {
            return itf;
          }
        }
      }
    }
    std::vector<std::string> names;  // once each, though most have an IPv4 and an IPv6 address
    for (const auto& itf : interfaces) {
      if (std::find(names.begin(), names.end(), itf.name) == names.end()) names.push_back(itf.name);
    }
    std::string have;
    for (const auto& name : names) have += (have.empty() ? "" : ", ") + name;
    return Status(weftInvalidArgument, "WEFT_SOCKET_IFNAME=\"" + *spec + "\" matches no interface that is up (have: " +
                                           have + ")");
  }
  InterfaceFilter secondary = InterfaceFilter::parse("docker,virbr,veth,br-,lo");
  for (int family : {AF_INET, AF_INET6}) {
    for (const auto& itf : interfaces) {
      if (itf.address.family() == family && !secondary.matches(itf.name)) return itf;
    }
  }
  for (const auto& itf : interfaces) {
    if (!itf.address.isLoopback()) return itf;
  }
  for (const auto& itf : interfaces) return itf;
  return Status(weftSystemError, "no network interface is up");
}

Result<SocketAddress> chooseListenAddress(const SocketAddress& root, bool spansHosts) {
  if (!envString("WEFT_SOCKET_IFNAME")) {
    WEFT_ASSIGN_OR_RETURN(SocketAddress toward, localAddressToward(root));
    if (!toward.isLoopback() || !spansHosts) return toward;
  }
  WEFT_ASSIGN_OR_RETURN(auto itf, chooseInterface());
  return itf.address;
}

}  // namespace weft::transport
