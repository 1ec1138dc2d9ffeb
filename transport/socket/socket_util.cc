#include "transport/socket/socket_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <span>
#include <vector>

namespace weft::transport {
namespace {

constexpr int kAbortPollMs = 50;  // how often a blocked wait looks at the abort flag

bool aborted(const std::atomic<bool>* flag) { return flag != nullptr && flag->load(std::memory_order_relaxed); }

Status abortedStatus() { return Status(weftRemoteError, "the communicator was aborted"); }

// Waits for `events` on any of fds (their revents say which); weftTimeout at the deadline.
Status waitForAny(std::span<pollfd> fds, const Deadline& deadline, const std::atomic<bool>* abortFlag, const char* what) {
  for (;;) {
    if (aborted(abortFlag)) return abortedStatus();
    int waitMs = deadline.remainingMs(abortFlag ? kAbortPollMs : 1 << 30);
    if (waitMs == 0 && deadline.expired()) {
      return Status(weftTimeout, formatString("timed out waiting to %s", what));
    }
    int n = ::poll(fds.data(), fds.size(), waitMs);
    if (n > 0) return Status::ok();
    if (n < 0 && errno != EINTR) return Status(weftSystemError, "poll: " + errnoString(errno));
  }
}

Status waitFor(int fd, short events, const Deadline& deadline, const std::atomic<bool>* abortFlag,
               const char* what) {
  pollfd pfd{fd, events, 0};
  return waitForAny({&pfd, 1}, deadline, abortFlag, what);
}

}  // namespace

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) reset(other.release());
  return *this;
}

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

Result<SocketAddress> SocketAddress::fromSockaddr(const sockaddr* addr, socklen_t len) {
  if (len > sizeof(SocketAddress::Ip) || (addr->sa_family != AF_INET && addr->sa_family != AF_INET6)) {
    return Status(weftInternalError, "unsupported socket address family");
  }
  SocketAddress out;
  std::memcpy(&out.storage, addr, len);
  out.length = len;
  return out;
}

Result<SocketAddress> SocketAddress::parse(const std::string& text, int defaultPort) {
  std::string host = text;
  std::string port = defaultPort >= 0 ? std::to_string(defaultPort) : "";
  if (!text.empty() && text[0] == '[') {
    size_t close = text.find(']');
    if (close == std::string::npos) return Status(weftInvalidArgument, "malformed address \"" + text + "\"");
    host = text.substr(1, close - 1);
    if (close + 1 < text.size()) {
      if (text[close + 1] != ':') return Status(weftInvalidArgument, "malformed address \"" + text + "\"");
      port = text.substr(close + 2);
    }
  } else if (size_t colon = text.rfind(':'); colon != std::string::npos && text.find(':') == colon) {
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  if (host.empty() || port.empty()) {
    return Status(weftInvalidArgument, "address \"" + text + "\" needs the form host:port");
  }
  // Digits only (from_chars into an unsigned type takes no sign or blanks: "-0" is no port).
  unsigned portNumber = 0;
  const auto [end, error] = std::from_chars(port.data(), port.data() + port.size(), portNumber);
  if (error != std::errc() || end != port.data() + port.size() || portNumber > 65535) {
    return Status(weftInvalidArgument, "address \"" + text + "\" has an invalid port");
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_family = AF_UNSPEC;
  addrinfo* found = nullptr;
  int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found);
  if (rc != 0 || found == nullptr) {
    return Status(weftSystemError, "cannot resolve \"" + host + "\": " + gai_strerror(rc));
  }
  // Prefer IPv4 when a name resolves to both: it is what launchers' MASTER_ADDR usually means.
  addrinfo* pick = found;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET) { pick = a; break; }
  }
  auto result = fromSockaddr(pick->ai_addr, pick->ai_addrlen);
  ::freeaddrinfo(found);
  return result;
}

int SocketAddress::port() const {
  if (family() == AF_INET) return ntohs(storage.v4.sin_port);
  if (family() == AF_INET6) return ntohs(storage.v6.sin6_port);
  return -1;
}

void SocketAddress::setPort(int port) {
  if (family() == AF_INET) storage.v4.sin_port = htons(static_cast<uint16_t>(port));
  if (family() == AF_INET6) storage.v6.sin6_port = htons(static_cast<uint16_t>(port));
}

bool SocketAddress::isLoopback() const {
  if (family() == AF_INET) {
    return (ntohl(storage.v4.sin_addr.s_addr) >> 24) == 127;
  }
  if (family() == AF_INET6) return IN6_IS_ADDR_LOOPBACK(&storage.v6.sin6_addr);
  return false;
}

void SocketAddress::scopeLike(const SocketAddress& local) {
  if (family() != AF_INET6 || local.family() != AF_INET6) return;
  sockaddr_in6* mine = &storage.v6;
  const sockaddr_in6* theirs = &local.storage.v6;
  if (IN6_IS_ADDR_LINKLOCAL(&mine->sin6_addr) && mine->sin6_scope_id == 0 && IN6_IS_ADDR_LINKLOCAL(&theirs->sin6_addr)) {
    mine->sin6_scope_id = theirs->sin6_scope_id;
  }
}

std::string SocketAddress::toString() const {
  char host[INET6_ADDRSTRLEN] = "?";
  if (family() == AF_INET) {
    inet_ntop(AF_INET, &storage.v4.sin_addr, host, sizeof(host));
    return formatString("%s:%d", host, port());
  }
  if (family() == AF_INET6) {
    inet_ntop(AF_INET6, &storage.v6.sin6_addr, host, sizeof(host));
    return formatString("[%s]:%d", host, port());
  }
  return "<no address>";
}

WireAddress toWire(const SocketAddress& address) {
  WireAddress wire{};
  wire.family = htons(static_cast<uint16_t>(address.family()));
  wire.port = htons(static_cast<uint16_t>(address.port()));
  if (address.family() == AF_INET) {
    std::memcpy(wire.addr, &address.storage.v4.sin_addr, 4);
  } else if (address.family() == AF_INET6) {
    std::memcpy(wire.addr, &address.storage.v6.sin6_addr, 16);
  }
  return wire;
}

Result<SocketAddress> fromWire(const WireAddress& wire) {
  SocketAddress out;
  uint16_t family = ntohs(wire.family);
  if (family == AF_INET) {
    sockaddr_in* in = &out.storage.v4;
    in->sin_family = AF_INET;
    in->sin_port = wire.port;
    std::memcpy(&in->sin_addr, wire.addr, 4);
    out.length = sizeof(sockaddr_in);
  } else if (family == AF_INET6) {
    sockaddr_in6* in6 = &out.storage.v6;
    in6->sin6_family = AF_INET6;
    in6->sin6_port = wire.port;
    std::memcpy(&in6->sin6_addr, wire.addr, 16);
    out.length = sizeof(sockaddr_in6);
  } else {
    return Status(weftInvalidArgument, formatString("unknown address family %u on the wire", family));
  }
  return out;
}

// Buffer sizes are left to the kernel's autotuning, which grows them up to net.ipv4.tcp_wmem /
// tcp_rmem's maximum (several MiB) on a busy stream: setting SO_SNDBUF/SO_RCVBUF would switch
// autotuning off and cap them at net.core.wmem_max/rmem_max, usually far smaller.
Status configureStreamSocket(int fd) {
  int one = 1;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0 ||
      ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)) != 0) {
    return Status(weftSystemError, "setsockopt: " + errnoString(errno));
  }
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0 || ::fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) {
    return Status(weftSystemError, "fcntl: " + errnoString(errno));
  }
  return Status::ok();
}

Result<UniqueFd> listenOn(const SocketAddress& address, SocketAddress* bound) {
  UniqueFd fd(::socket(address.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Status(weftSystemError, "socket: " + errnoString(errno));
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd.get(), address.sockaddrPtr(), address.length) != 0) {
    return Status(weftSystemError, "cannot listen on " + address.toString() + ": " + errnoString(errno));
  }
  if (::listen(fd.get(), 1024) != 0) return Status(weftSystemError, "listen: " + errnoString(errno));
  if (bound != nullptr) {
    sockaddr_storage storage{};
    socklen_t len = sizeof(storage);
    ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&storage), &len);
    auto actual = SocketAddress::fromSockaddr(reinterpret_cast<sockaddr*>(&storage), len);
    if (!actual.isOk()) return actual.status();
    *bound = actual.value();
  }
  return fd;
}

namespace {

// TCP's simultaneous open: connecting to a port in the ephemeral range where nothing listens,
// the kernel may pick that very port as the source, and the socket connects to itself. Such a
// rank would read its own hello as the answer, and hold the port its peer means to listen on.
bool connectedToItself(int fd) {
  sockaddr_storage self{}, peer{};
  socklen_t selfLength = sizeof(self), peerLength = sizeof(peer);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&self), &selfLength) != 0 ||
      ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peerLength) != 0) {
    return false;
  }
  return selfLength == peerLength && std::memcmp(&self, &peer, selfLength) == 0;
}

}  // namespace

Result<UniqueFd> connectTo(const SocketAddress& address, const Deadline& deadline,
                           const std::atomic<bool>* abortFlag, const SocketAddress* source, OnRefused onRefused) {
  int backoffMs = 1;
  for (;;) {
    if (aborted(abortFlag)) return abortedStatus();
    UniqueFd fd(::socket(address.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd.valid()) return Status(weftSystemError, "socket: " + errnoString(errno));
    if (source != nullptr) {
      SocketAddress from = *source;
      from.setPort(0);
      if (::bind(fd.get(), from.sockaddrPtr(), from.length) != 0) {
        return Status(weftSystemError, "cannot bind to " + from.toString() + " to connect to " + address.toString() +
                                           ": " + errnoString(errno));
      }
    }
    int rc = ::connect(fd.get(), address.sockaddrPtr(), address.length);
    int err = rc == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      Status waited = waitFor(fd.get(), POLLOUT, deadline, abortFlag, ("connect to " + address.toString()).c_str());
      if (!waited.isOk()) return waited;
      socklen_t len = sizeof(err);
      ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    }
    if (err == 0 && connectedToItself(fd.get())) err = ECONNREFUSED;  // nothing listens there yet
    if (err == 0) {
      WEFT_TRY(configureStreamSocket(fd.get()));
      return fd;
    }
    if (err == ECONNREFUSED && onRefused == OnRefused::Fail) {
      return Status(weftRemoteError, "the connection to " + address.toString() +
                                         " was refused: nothing listens there any more (its process has exited, "
                                         "or the address does not lead to it from here)");
    }
    bool retryable = err == ECONNREFUSED || err == ETIMEDOUT || err == ECONNRESET || err == EHOSTUNREACH ||
                     err == ENETUNREACH || err == EAGAIN;
    if (!retryable) {
      return Status(weftSystemError, "cannot connect to " + address.toString() + ": " + errnoString(err));
    }
    if (deadline.expired()) {
      return Status(weftTimeout, "timed out connecting to " + address.toString() + " (last error: " +
                                     errnoString(err) + ")");
    }
    ::poll(nullptr, 0, std::min(backoffMs, deadline.remainingMs()));
    backoffMs = std::min(backoffMs * 2, 100);
  }
}

int firstHungUp(std::span<const int> fds) {
  std::vector<pollfd> polled;
  for (int fd : fds) polled.push_back({fd, POLLRDHUP, 0});
  if (polled.empty() || ::poll(polled.data(), polled.size(), 0) <= 0) return -1;
  for (size_t i = 0; i < polled.size(); ++i) {
    if ((polled[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) return static_cast<int>(i);
  }
  return -1;
}

Result<UniqueFd> acceptNow(int listenFd, SocketAddress* peerAddress) {
  for (;;) {
    sockaddr_storage storage{};
    socklen_t len = sizeof(storage);
    int fd = ::accept4(listenFd, reinterpret_cast<sockaddr*>(&storage), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      UniqueFd owned(fd);
      WEFT_TRY(configureStreamSocket(fd));
      if (peerAddress != nullptr) {
        auto addr = SocketAddress::fromSockaddr(reinterpret_cast<sockaddr*>(&storage), len);
        if (addr.isOk()) *peerAddress = addr.value();
      }
      return owned;
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;  // the next one, if any
    if (errno == EAGAIN || errno == EWOULDBLOCK) return UniqueFd();
    return Status(weftSystemError, "accept: " + errnoString(errno));
  }
}

Result<UniqueFd> acceptAny(std::span<const int> listenFds, const Deadline& deadline,
                           const std::atomic<bool>* abortFlag, SocketAddress* peerAddress) {
  std::vector<pollfd> fds;
  for (int fd : listenFds) fds.push_back({fd, POLLIN, 0});
  for (;;) {
    for (const pollfd& listener : fds) {
      WEFT_ASSIGN_OR_RETURN(UniqueFd fd, acceptNow(listener.fd, peerAddress));
      if (fd.valid()) return fd;
    }
    WEFT_TRY(waitForAny(fds, deadline, abortFlag, "accept a connection"));
  }
}

Result<UniqueFd> acceptOne(int listenFd, const Deadline& deadline, const std::atomic<bool>* abortFlag,
                           SocketAddress* peerAddress) {
  return acceptAny({&listenFd, 1}, deadline, abortFlag, peerAddress);
}

Status sendAll(int fd, const void* data, size_t bytes, const Deadline& deadline,
               const std::atomic<bool>* abortFlag) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      WEFT_TRY(waitFor(fd, POLLOUT, deadline, abortFlag, "send"));
      continue;
    }
    return Status(weftRemoteError, "connection lost while sending: " + errnoString(errno));
  }
  return Status::ok();
}

Status recvAll(int fd, void* data, size_t bytes, const Deadline& deadline,
               const std::atomic<bool>* abortFlag) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    ssize_t n = ::recv(fd, p, bytes, 0);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return Status(weftRemoteError, "connection closed by the peer");
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      WEFT_TRY(waitFor(fd, POLLIN, deadline, abortFlag, "receive"));
      continue;
    }
    return Status(weftRemoteError, "connection lost while receiving: " + errnoString(errno));
  }
  return Status::ok();
}

Result<SocketAddress> localAddressToward(const SocketAddress& remote) {
  UniqueFd fd(::socket(remote.family(), SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Status(weftSystemError, "socket: " + errnoString(errno));
  SocketAddress target = remote;
  if (target.port() == 0) target.setPort(9);
  if (::connect(fd.get(), target.sockaddrPtr(), target.length) != 0) {
    return Status(weftSystemError, "no route to " + remote.toString() + ": " + errnoString(errno));
  }
  sockaddr_storage storage{};
  socklen_t len = sizeof(storage);
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&storage), &len);
  auto local = SocketAddress::fromSockaddr(reinterpret_cast<sockaddr*>(&storage), len);
  if (local.isOk()) local.value().setPort(0);
  return local;
}

bool constantTimeEqual(const void* a, const void* b, size_t bytes) {
  const volatile unsigned char* x = static_cast<const unsigned char*>(a);
  const volatile unsigned char* y = static_cast<const unsigned char*>(b);
  unsigned char diff = 0;
  for (size_t i = 0; i < bytes; ++i) diff |= static_cast<unsigned char>(x[i] ^ y[i]);
  return diff == 0;
}

}  // namespace weft::transport
