#include "transport/socket/tcp_peer_end.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <vector>

#include "util/status.h"

namespace weft::transport {
namespace {

// One endpoint as /proc/net/tcp{,6} prints it: the address's 32-bit words as the kernel holds
// them (network order, printed as native integers), then the port in hex.
struct ListedEndpoint {
  const char* file;
  std::string text;
};

// How `address` appears: in tcp6 as itself, and an IPv4-mapped one also in tcp (where the socket
// at that end is IPv4).
std::vector<ListedEndpoint> listings(const sockaddr_storage& address) {
  std::vector<ListedEndpoint> out;
  if (address.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(address);
    out.push_back({"/proc/net/tcp", formatString("%08X:%04X", in.sin_addr.s_addr, ntohs(in.sin_port))});
  } else if (address.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(address);
    uint32_t words[4];
    std::memcpy(words, &in6.sin6_addr, sizeof(words));
    out.push_back({"/proc/net/tcp6", formatString("%08X%08X%08X%08X:%04X", words[0], words[1], words[2], words[3],
                                                  ntohs(in6.sin6_port))});
    if (IN6_IS_ADDR_V4MAPPED(&in6.sin6_addr)) {
      out.push_back({"/proc/net/tcp", formatString("%08X:%04X", words[3], ntohs(in6.sin6_port))});
    }
  }
  return out;
}

std::optional<TcpPeerEnd> findListed(const char* file, const std::string& local, const std::string& remote) {
  FILE* listing = std::fopen(file, "re");
  if (listing == nullptr) return std::nullopt;
  std::optional<TcpPeerEnd> found;
  char line[512];
  (void)std::fgets(line, sizeof(line), listing);  // the header
  while (!found && std::fgets(line, sizeof(line), listing) != nullptr) {
    char lineLocal[64], lineRemote[64];
    unsigned state = 0;
    uint64_t unacked = 0, inode = 0;
    // "sl: local remote st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode ..."
    if (std::sscanf(line, " %*d: %63s %63s %x %" SCNx64 ":%*x %*s %*s %*s %*s %" SCNu64, lineLocal, lineRemote,
                    &state, &unacked, &inode) != 5) {
      continue;
    }
    if (local != lineLocal || remote != lineRemote) continue;
    found = TcpPeerEnd{static_cast<int>(state), unacked, inode == 0};
  }
  std::fclose(listing);
  return found;
}

const char* stateName(int state) {
  switch (state) {
    case TCP_ESTABLISHED: return "established";
    case TCP_FIN_WAIT1: return "fin-wait-1";
    case TCP_FIN_WAIT2: return "fin-wait-2";
    case TCP_CLOSE_WAIT: return "close-wait";
    case TCP_CLOSING: return "closing";
    case TCP_LAST_ACK: return "last-ack";
    case TCP_TIME_WAIT: return "time-wait";
    case TCP_CLOSE: return "closed";
    default: return "other";
  }
}

}  // namespace

std::string TcpPeerEnd::describe() const {
  return formatString("%s, %" PRIu64 " byte(s) unacknowledged, %s", stateName(state), unackedBytes,
                      orphaned ? "closed by its process" : "held open by a process");
}

std::optional<TcpPeerEnd> findTcpPeerEnd(int fd) {
  sockaddr_storage mine{}, theirs{};
  socklen_t mineLength = sizeof(mine), theirsLength = sizeof(theirs);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&mine), &mineLength) != 0 ||
      ::getpeername(fd, reinterpret_cast<sockaddr*>(&theirs), &theirsLength) != 0) {
    return std::nullopt;
  }
  // The far end's local address is this end's peer, and the other way round.
  const auto locals = listings(theirs);
  const auto remotes = listings(mine);
  for (const auto& local : locals) {
    for (const auto& remote : remotes) {
      if (std::strcmp(local.file, remote.file) != 0) continue;
      if (auto found = findListed(local.file, local.text, remote.text)) return found;
    }
  }
  return std::nullopt;
}

}  // namespace weft::transport
