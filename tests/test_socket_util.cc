// Socket plumbing without processes: WEFT_SOCKET_IFNAME's NCCL syntax, address parsing and
// the wire form of addresses (including what a hostile peer could put there), and the far end
// of a loopback stream as the kernel lists it.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "transport/socket/interface_select.h"
#include "transport/socket/socket_util.h"
#include "transport/socket/tcp_peer_end.h"
#include "util/deadline.h"

using namespace weft;
using namespace weft::transport;

TEST_CASE("WEFT_SOCKET_IFNAME: prefixes, exclusion and exact names, as NCCL_SOCKET_IFNAME", "[socket]") {
  auto prefixes = InterfaceFilter::parse("eth,ib");
  CHECK(prefixes.matches("eth0"));
  CHECK(prefixes.matches("ib1"));
  CHECK_FALSE(prefixes.matches("lo"));
  CHECK_FALSE(prefixes.matches("veth3"));

  auto exclude = InterfaceFilter::parse("^docker,lo");
  CHECK(exclude.matches("eth0"));
  CHECK_FALSE(exclude.matches("docker0"));
  CHECK_FALSE(exclude.matches("lo"));

  auto exact = InterfaceFilter::parse("=eth0");
  CHECK(exact.matches("eth0"));
  CHECK_FALSE(exact.matches("eth01"));

  auto excludeExact = InterfaceFilter::parse("^=eth0,eth1");
  CHECK_FALSE(excludeExact.matches("eth0"));
  CHECK_FALSE(excludeExact.matches("eth1"));
  CHECK(excludeExact.matches("eth10"));

  auto withPort = InterfaceFilter::parse("=veth-a:1234");  // NCCL allows a port after the name
  CHECK(withPort.matches("veth-a"));

  auto empty = InterfaceFilter::parse("");
  CHECK_FALSE(empty.matches("eth0"));
}

TEST_CASE("WEFT_SOCKET_IFNAME: an exclusion picks loopback only where nothing else is left", "[socket]") {
  auto all = listInterfaces();
  REQUIRE(all.isOk());
  const auto filter = InterfaceFilter::parse("^docker");
  const bool other = std::any_of(all.value().begin(), all.value().end(), [&](const NetworkInterface& itf) {
    return !itf.address.isLoopback() && filter.matches(itf.name);
  });
  setenv("WEFT_SOCKET_IFNAME", "^docker", 1);
  auto chosen = chooseInterface();
  setenv("WEFT_SOCKET_IFNAME", "lo", 1);  // named: loopback it is
  auto named = chooseInterface();
  unsetenv("WEFT_SOCKET_IFNAME");
  REQUIRE(chosen.isOk());
  CHECK(chosen.value().address.isLoopback() == !other);
  REQUIRE(named.isOk());
  CHECK(named.value().address.isLoopback());
}

TEST_CASE("WEFT_SOCKET_IFNAME naming no interface is an invalid argument listing each interface once", "[socket]") {
  setenv("WEFT_SOCKET_IFNAME", "=no-such-interface", 1);
  auto chosen = chooseInterface();
  unsetenv("WEFT_SOCKET_IFNAME");
  REQUIRE_FALSE(chosen.isOk());
  CHECK(chosen.status().code() == weftInvalidArgument);
  const std::string text = chosen.status().message();
  CHECK(text.find("no-such-interface") != std::string::npos);
  // Most interfaces have an IPv4 and an IPv6 address: each is named once all the same.
  const size_t open = text.find("(have: ");
  REQUIRE(open != std::string::npos);
  std::vector<std::string> names;
  std::stringstream list(text.substr(open + 7, text.rfind(')') - open - 7));
  for (std::string name; std::getline(list, name, ',');) names.push_back(name.substr(name.find_first_not_of(' ')));
  CHECK_FALSE(names.empty());
  std::sort(names.begin(), names.end());
  CHECK(std::adjacent_find(names.begin(), names.end()) == names.end());
}

TEST_CASE("socket addresses parse, print and cross the wire", "[socket]") {
  auto v4 = SocketAddress::parse("127.0.0.1:29500");
  REQUIRE(v4.isOk());
  CHECK(v4.value().port() == 29500);
  CHECK(v4.value().isLoopback());
  CHECK(v4.value().toString() == "127.0.0.1:29500");
  auto back = fromWire(toWire(v4.value()));
  REQUIRE(back.isOk());
  CHECK(back.value().toString() == "127.0.0.1:29500");

  auto v6 = SocketAddress::parse("[::1]:7");
  REQUIRE(v6.isOk());
  CHECK(v6.value().toString() == "[::1]:7");
  CHECK(fromWire(toWire(v6.value())).value().toString() == "[::1]:7");

  CHECK_FALSE(SocketAddress::parse("127.0.0.1:99999").isOk());
  CHECK_FALSE(SocketAddress::parse("no-such-host.invalid:1").isOk());

  WireAddress garbage;
  std::memset(&garbage, 0xff, sizeof(garbage));
  auto bad = fromWire(garbage);
  CHECK_FALSE(bad.isOk());
  CHECK(bad.status().code() != weftSuccess);
}

TEST_CASE("secrets compare in constant time and exactly", "[socket]") {
  unsigned char a[32] = {}, b[32] = {};
  CHECK(constantTimeEqual(a, b, sizeof(a)));
  b[31] = 1;
  CHECK_FALSE(constantTimeEqual(a, b, sizeof(a)));
  b[31] = 0;
  b[0] = 0x80;
  CHECK_FALSE(constantTimeEqual(a, b, sizeof(a)));
}

TEST_CASE("connecting to a port where nothing listens never connects a socket to itself", "[socket]") {
  // In a network namespace of its own whose ephemeral ports are just 40000 and 40001, the
  // kernel soon picks 40000 as the source of a connection to 40000 (TCP's simultaneous open).
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    if (unshare(CLONE_NEWNET) != 0) _exit(77);
    std::ofstream("/proc/sys/net/ipv4/ip_local_port_range") << "40000 40001\n";
    int low = 0, high = 0;
    std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> low >> high;
    if (low != 40000 || high != 40001) _exit(77);  // a read-only /proc/sys
    if (std::system("ip link set lo up") != 0) _exit(77);
    auto to = SocketAddress::parse("127.0.0.1:40000").value();
    auto fd = connectTo(to, Deadline::afterMs(1500));
    if (fd.isOk()) _exit(1);                                 // connected to nothing: to itself
    _exit(fd.status().code() == weftTimeout ? 0 : 2);       // kept retrying until the deadline
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 77) {
    WARN("cannot make a network namespace with its own port range here (needs root): not tested");
    return;
  }
  CHECK(WEXITSTATUS(status) == 0);
}

namespace {

// A connected pair of TCP sockets on loopback (`family`): {accepted, connecting}; {-1, -1} where
// the family has no loopback here.
std::pair<int, int> loopbackPair(int family) {
  const int listener = ::socket(family, SOCK_STREAM, 0);
  sockaddr_storage address{};
  socklen_t length = 0;
  if (family == AF_INET) {
    auto& in = reinterpret_cast<sockaddr_in&>(address);
    in.sin_family = AF_INET;
    in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    length = sizeof(in);
  } else {
    auto& in6 = reinterpret_cast<sockaddr_in6&>(address);
    in6.sin6_family = AF_INET6;
    in6.sin6_addr = in6addr_loopback;
    length = sizeof(in6);
  }
  if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
      ::listen(listener, 1) != 0 || ::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    if (listener >= 0) ::close(listener);
    return {-1, -1};
  }
  const int connecting = ::socket(family, SOCK_STREAM, 0);
  REQUIRE(::connect(connecting, reinterpret_cast<sockaddr*>(&address), length) == 0);
  const int accepted = ::accept(listener, nullptr, nullptr);
  ::close(listener);
  return {accepted, connecting};
}

}  // namespace

TEST_CASE("the far end of a loopback stream: whether it holds bytes back and whether a process holds it",
          "[socket]") {
  for (int family : {AF_INET, AF_INET6}) {
    DYNAMIC_SECTION((family == AF_INET ? "IPv4" : "IPv6")) {
      auto [near, far] = loopbackPair(family);
      if (near < 0) {
        WARN("no loopback for this family here: skipped");
        continue;
      }
      auto end = findTcpPeerEnd(near);
      REQUIRE(end.has_value());
      CHECK(end->state == TCP_ESTABLISHED);
      CHECK(end->unackedBytes == 0);
      CHECK_FALSE(end->orphaned);

      // The near end reads nothing: the far end's writes fill this end's buffer, then its own.
      const int flags = ::fcntl(far, F_GETFL);
      REQUIRE(::fcntl(far, F_SETFL, flags | O_NONBLOCK) == 0);
      std::vector<char> chunk(1 << 16, 'x');
      size_t written = 0;
      while (written < (size_t{256} << 20)) {
        const ssize_t n = ::send(far, chunk.data(), chunk.size(), MSG_NOSIGNAL);
        if (n <= 0) break;
        written += static_cast<size_t>(n);
      }
      end = findTcpPeerEnd(near);
      REQUIRE(end.has_value());
      CHECK(end->unackedBytes > 0);
      CHECK_FALSE(end->orphaned);
      INFO(end->describe());

      // Closed with its bytes still queued: the kernel keeps the end to deliver them.
      ::close(far);
      end = findTcpPeerEnd(near);
      REQUIRE(end.has_value());
      CHECK(end->orphaned);
      CHECK(end->state == TCP_FIN_WAIT1);
      CHECK(end->unackedBytes > 0);
      CHECK_THAT(end->describe(), Catch::Contains("fin-wait-1") && Catch::Contains("closed by its process"));
      ::close(near);
    }
  }
  int pipeFds[2];
  REQUIRE(::pipe(pipeFds) == 0);
  CHECK_FALSE(findTcpPeerEnd(pipeFds[0]).has_value());  // not a socket
  ::close(pipeFds[0]);
  ::close(pipeFds[1]);
}
