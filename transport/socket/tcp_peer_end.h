// The far end of a TCP connection whose two ends are both on this host, as the kernel lists it
// in /proc/net/tcp (and tcp6) of this network namespace: its state, the bytes it has written
// that this end has not yet acknowledged, and whether any process still holds it.
//
// A socket connection looks here when its peer's process is gone, to tell apart the two ways
// its stream can then look open: the peer's end orphaned (closed by its process: the kernel
// still delivers what it had queued, then the end of the stream) from an end that a process the
// peer forked still holds (which never ends the stream: the peer must be reported exited).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace weft::transport {

struct TcpPeerEnd {
  int state = 0;             // as in netinet/tcp.h: TCP_ESTABLISHED, TCP_FIN_WAIT1, ...
  uint64_t unackedBytes = 0;  // written by the far end, not yet acknowledged by this one
  bool orphaned = false;      // no process holds it (its inode is 0): closed, still delivering

  std::string describe() const;
};

// The far end of the connected TCP socket `fd`; nullopt where it is not listed here (another
// network namespace or host, already gone, or `fd` not a connected TCP/IP socket).
std::optional<TcpPeerEnd> findTcpPeerEnd(int fd);

}  // namespace weft::transport
