// TCP plumbing shared by the bootstrap and the socket transport: addresses, listening,
// connecting and whole-buffer I/O, each bounded by a Deadline and interruptible by an abort flag.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <span>
#include <string>

#include "util/deadline.h"
#include "util/status.h"

namespace weft::transport {

// An IPv4 or IPv6 address and port: 32 bytes, not sockaddr_storage's 128, since every rank keeps
// one per NIC for every peer (core/bootstrap.h's PeerInfo).
struct SocketAddress {
  union Ip {
    sockaddr_in6 v6;  // first, so that {} zeroes all of it
    sockaddr_in v4;
    sockaddr any;
  };
  Ip storage{};
  socklen_t length = 0;

  static Result<SocketAddress> fromSockaddr(const sockaddr* addr, socklen_t len);
  // "host:port", "[v6]:port" or "host" + default port; resolves names.
  static Result<SocketAddress> parse(const std::string& text, int defaultPort = -1);

  int family() const { return storage.any.sa_family; }
  int port() const;
  void setPort(int port);
  bool isLoopback() const;
  // A link-local IPv6 address means something only with its interface (the scope id), which is
  // a host's own number and so does not travel on the wire. A peer's link-local address that
  // came without one takes `local`'s, where that is link-local too: the link they share.
  void scopeLike(const SocketAddress& local);
  std::string toString() const;
  const sockaddr* sockaddrPtr() const { return &storage.any; }
};
static_assert(sizeof(SocketAddress) == 32);

// Fixed 20-byte wire form: family (2), port (2), address (16), network byte order.
struct WireAddress {
  uint16_t family;
  uint16_t port;
  uint8_t addr[16];
};
WireAddress toWire(const SocketAddress& address);
Result<SocketAddress> fromWire(const WireAddress& wire);

// A file descriptor that closes itself.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() { int fd = fd_; fd_ = -1; return fd; }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// Binds and listens (non-blocking). Port 0 picks a free port; the bound address is returned.
Result<UniqueFd> listenOn(const SocketAddress& address, SocketAddress* bound);

// What a refused connection means: the listener may not be up yet (Retry, until the deadline),
// or it is known to have been up, so nothing listens there any more (Fail: weftRemoteError).
enum class OnRefused { Retry, Fail };

// Connects, retrying unreachable peers until the deadline; from `source` (its port ignored)
// when given, so that the connection leaves by that interface.
Result<UniqueFd> connectTo(const SocketAddress& address, const Deadline& deadline,
                           const std::atomic<bool>* abortFlag = nullptr, const SocketAddress* source = nullptr,
                           OnRefused onRefused = OnRefused::Retry);

// The index of the first of `fds` whose peer has hung up (closed or shut down its end, or the
// connection failed), without waiting; -1 when none has. Invalid fds (-1) are passed over.
int firstHungUp(std::span<const int> fds);

// Accepts a connection the (non-blocking) listener holds now, without waiting: an invalid fd
// when none is queued, weftSystemError when accept fails (out of descriptors, say).
Result<UniqueFd> acceptNow(int listenFd, SocketAddress* peerAddress = nullptr);
// Accepts one connection; weftTimeout at the deadline. The new socket is non-blocking.
Result<UniqueFd> acceptOne(int listenFd, const Deadline& deadline,
                           const std::atomic<bool>* abortFlag = nullptr,
                           SocketAddress* peerAddress = nullptr);
// The same, from whichever of several listening sockets has a connection first.
Result<UniqueFd> acceptAny(std::span<const int> listenFds, const Deadline& deadline,
                           const std::atomic<bool>* abortFlag = nullptr, SocketAddress* peerAddress = nullptr);

// Whole-buffer I/O on a non-blocking socket. A closed or reset connection is weftRemoteError.
Status sendAll(int fd, const void* data, size_t bytes, const Deadline& deadline,
               const std::atomic<bool>* abortFlag = nullptr);
Status recvAll(int fd, void* data, size_t bytes, const Deadline& deadline,
               const std::atomic<bool>* abortFlag = nullptr);

// TCP_NODELAY, keepalive, non-blocking, close-on-exec.
Status configureStreamSocket(int fd);

// The local address the kernel would use to reach `remote` (no packet is sent).
Result<SocketAddress> localAddressToward(const SocketAddress& remote);

// Constant-time comparison for secrets.
bool constantTimeEqual(const void* a, const void* b, size_t bytes);

}  // namespace weft::transport
