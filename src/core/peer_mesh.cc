#include "core/peer_mesh.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <numeric>
#include <thread>

#include "core/flood_eviction.h"
#include "transport/socket/descriptor_limit.h"
#include "transport/socket/socket_connection.h"
#include "util/log.h"

namespace weft::core {

using transport::UniqueFd;

namespace {
constexpr int kHelloDeadlineMs = 5000;      // an accepted connection must introduce itself this fast
constexpr size_t kMaxPendingHellos = 256;   // accepted connections still to say hello
constexpr int kAbortSliceMs = 100;          // how often a wait looks at the abort flag
}

PeerMesh::PeerMesh(int rank, Rendezvous rendezvous, const Secret& secret, int streamsPerPeer,
                   const transport::ShmOptions& shm, std::vector<plan::Transport> transports,
                   std::vector<std::vector<std::pair<int, int>>> channelNics, const std::atomic<bool>* abortFlag)
    : rank_(rank),
      peers_(std::move(rendezvous.peers)),
      listenFd_(std::move(rendezvous.listenFd)),
      railListenFds_(std::move(rendezvous.railListenFds)),
      secret_(secret),
      streamsPerPeer_(streamsPerPeer),
      channelNics_(std::move(channelNics)),
      shm_(shm),
      transports_(std::move(transports)),
      abortFlag_(abortFlag),
      connections_(peers_.size()) {
  channelNics_.resize(peers_.size());
  for (const auto& nics : channelNics_) streamsByRank_.push_back(streamCount(nics, streamsPerPeer_));
}

std::string PeerMesh::describe(int rank) const {
  if (rank < 0 || rank >= size()) return "rank " + std::to_string(rank);
  const PeerInfo& p = peer(rank);
  return formatString("rank %d (%s, pid %u)", rank, p.hostName.c_str(), p.pid);
}

Result<transport::Connection*> PeerMesh::connection(int peer, const Deadline& deadline) {
  if (peer < 0 || peer >= size() || peer == rank_) {
    return Status(weftInternalError, formatString("no connection from rank %d to rank %d", rank_, peer));
  }
  auto& slot = connections_[static_cast<size_t>(peer)];
  if (!slot) {
    Status made = rank_ < peer ? connectTo(peer, deadline) : acceptFrom(peer, deadline);
    if (!made.isOk()) return made.withContext("connecting to " + describe(peer));
  }
  return slot.get();
}

void PeerMesh::makeRoomForStreams(std::span<const int> peers) const {
  size_t streams = 0;
  for (int peer : peers) {
    if (peer != rank_ && !connections_[static_cast<size_t>(peer)]) streams += streamsByRank_[static_cast<size_t>(peer)];
  }
  transport::makeRoomForDescriptors(streams);
}

Status PeerMesh::connectPeers(std::vector<int> peers, const Deadline& deadline) {
  std::sort(peers.begin(), peers.end());  // the global pair order, restricted to these pairs
  makeRoomForStreams(peers);
  for (int peer : peers) WEFT_TRY(connection(peer, deadline).status());
  return Status::ok();
}

// Setting up a pair is a blocking handshake on both sides (shared-memory setup in particular),
// so pairs are taken in one global order, by (higher rank, lower rank): the earliest pair not
// yet done always has both of its ranks working on it, so no cycle of waits can form. Visiting
// peers in ascending rank order follows that order, for all peers or any subset of them.
Status PeerMesh::connectAll(const Deadline& deadline) {
  if (connected_) return Status::ok();
  std::vector<int> everyone(static_cast<size_t>(size()));
  std::iota(everyone.begin(), everyone.end(), 0);
  makeRoomForStreams(everyone);
  for (int peer = 0; peer < size(); ++peer) {
    if (peer != rank_) WEFT_TRY(connection(peer, deadline).status());
  }
  connected_ = true;
  pending_.clear();  // every peer is connected: what still waits to say hello is nobody's
  return Status::ok();
}

// Every peer listens on its main address from before it joined the rendezvous until its
// communicator goes, so a refused connection there means the peer is gone: an error at once,
// not retries until the timeout.
//
// A rail is tried for a quarter of the time left (at least 100 ms, at most 5 s): the peer listens
// on it already, so a rail that refuses or drops the connection that long is broken (down,
// filtered, or routed nowhere), and the stream takes the peer's main address instead, as a NIC
// without a rail does. The peer accepts on every listener alike, so it needs no word of the
// change. A local NIC whose rail failed once is not tried again by this mesh: each try would
// cost its share of the deadline again.
Result<UniqueFd> PeerMesh::connectStream(int peer, const StreamRoute& route, const Deadline& deadline, bool* onRail) {
  *onRail = false;
  const transport::SocketAddress& main = this->peer(peer).listen;
  if (route.source == nullptr || brokenRails_.contains(route.localNic)) {
    // A route without a source goes to the main address.
    return transport::connectTo(main, deadline, abortFlag_, nullptr, transport::OnRefused::Fail);
  }
  const int railMs = std::min(5000, std::max(100, deadline.remainingMs() / 4));
  auto fd = transport::connectTo(route.destination, deadline.earlier(Deadline::afterMs(railMs)), abortFlag_,
                                 route.source);
  const bool aborted = abortFlag_ != nullptr && abortFlag_->load(std::memory_order_relaxed);
  if (fd.isOk() || aborted || deadline.expired()) {
    *onRail = fd.isOk();
    return fd;
  }
  brokenRails_.insert(route.localNic);
  WEFT_WARN("rank %d: rail from NIC %d to %s failed (%s); streams from that NIC go to main addresses instead, "
            "this one to %s at %s", rank_, route.localNic, route.destination.toString().c_str(),
            fd.status().message().c_str(), describe(peer).c_str(), main.toString().c_str());
  return transport::connectTo(main, deadline, abortFlag_, nullptr, transport::OnRefused::Fail);
}

Status PeerMesh::connectTo(int peer, const Deadline& deadline) {
  const auto routes = streamRoutes(channelNics_[static_cast<size_t>(peer)], streamsPerPeer_, this->peer(rank_).rails,
                                   this->peer(peer).listen, this->peer(peer).rails);
  const int count = static_cast<int>(routes.size());
  std::vector<UniqueFd> streams;
  std::string rails;
  for (int s = 0; s < count; ++s) {
    const StreamRoute& route = routes[static_cast<size_t>(s)];
    bool onRail = false;
    WEFT_ASSIGN_OR_RETURN(UniqueFd fd, connectStream(peer, route, deadline, &onRail));
    PeerHello hello{kPeerHelloMagic, kProtocolVersion, static_cast<uint16_t>(s), {}, rank_, peer, count, 0};
    std::memcpy(hello.secret, secret_.data(), sizeof(hello.secret));
    WEFT_TRY(transport::sendAll(fd.get(), &hello, sizeof(hello), deadline, abortFlag_));
    streams.push_back(std::move(fd));
    if (onRail) {
      rails += formatString(" %d:NIC %d->%s", s, route.localNic, route.destination.toString().c_str());
    }
  }
  if (!rails.empty()) WEFT_INFO("rank %d: streams to %s on rails:%s", rank_, describe(peer).c_str(), rails.c_str());
  WEFT_TRACE("rank %d connected to %s", rank_, describe(peer).c_str());
  return adopt(peer, std::move(streams), deadline);
}

Status PeerMesh::acceptFrom(int peer, const Deadline& deadline) {
  for (;;) {
    auto it = arrived_.find(peer);
    if (it != arrived_.end() && static_cast<int>(it->second.size()) == streamsByRank_[static_cast<size_t>(peer)]) {
      bool complete = true;
      for (const auto& fd : it->second) complete = complete && fd.valid();
      if (complete) {
        std::vector<UniqueFd> streams = std::move(it->second);
        arrived_.erase(it);
        WEFT_TRACE("rank %d accepted %s", rank_, describe(peer).c_str());
        return adopt(peer, std::move(streams), deadline);
      }
    }
    // Streams of the peer that came while others are still to come: it went if one hangs up.
    std::vector<int> partial;
    if (it != arrived_.end()) {
      for (const auto& fd : it->second) {
        if (fd.valid()) partial.push_back(fd.get());
      }
    }
    const int want = streamsByRank_[static_cast<size_t>(peer)];
    if (transport::firstHungUp(partial) >= 0) {
      return Status(weftRemoteError, formatString("%s hung up after connecting %zu of its %d streams: it failed or "
                                                  "exited while connecting",
                                                  describe(peer).c_str(), partial.size(), want));
    }
    Status s = acceptAndSort(deadline, partial);
    if (s.code() == weftTimeout) {
      // Where this rank could not accept, that is the likelier cause: say so.
      const std::string what = partial.empty() ? " never connected before the timeout"
                                               : formatString(" connected %zu of its %d streams, and no more before "
                                                              "the timeout", partial.size(), want);
      return Status(weftTimeout, describe(peer) + what +
                                     (acceptError_.empty() ? "" : "; this rank could not accept: " + acceptError_));
    }
    WEFT_TRY(s);
  }
}

Status PeerMesh::adopt(int peer, std::vector<UniqueFd> streams, const Deadline& deadline) {
  const PeerInfo& info = this->peer(peer);
  auto& slot = connections_[static_cast<size_t>(peer)];
  const bool sameHost = transports_[static_cast<size_t>(peer)] == plan::Transport::Shm;
  if (sameHost) {
    // Both sides get here for a pair on one host, so both take part in the setup (a side with
    // shared memory disabled declines in it).
    std::string tag = formatString("%08x-%d-%d", secretDigest(), rank_, peer);
    transport::ShmPeer shmPeer{peer, info.hostName, static_cast<pid_t>(info.pid)};
    auto shm = transport::establishShm(shmPeer, streams, tag, shm_, deadline, abortFlag_);
    if (!shm.isOk()) return shm.status().withContext("shared memory with " + describe(peer));
    slot = shm.take();
  } else if (shm_.policy == transport::ShmPolicy::Required) {
    return Status(weftInvalidUsage, "WEFT_TRANSPORT=shm, but " + describe(peer) + " is on another host");
  }
  if (!slot) {
    // Its process can be watched where its pid means it here: same host, same pid namespace.
    const PeerInfo& me = this->peer(rank_);
    const bool samePids =
        info.hostHash == me.hostHash && info.pidNamespace != 0 && info.pidNamespace == me.pidNamespace;
    slot = std::make_unique<transport::SocketConnection>(peer, info.hostName, std::move(streams),
                                                         samePids ? static_cast<pid_t>(info.pid) : 0);
  }
  WEFT_INFO("rank %d: %s connection to %s", rank_, slot->kind(), describe(peer).c_str());
  return Status::ok();
}

Status PeerMesh::acceptAndSort(const Deadline& deadline, const std::vector<int>& watch) {
  std::vector<pollfd> fds{{listenFd_.get(), POLLIN, 0}};
  for (const auto& fd : railListenFds_) fds.push_back({fd.get(), POLLIN, 0});
  for (int fd : watch) fds.push_back({fd, POLLRDHUP, 0});
  Deadline wake = deadline;
  for (const PendingHello& p : pending_) {
    fds.push_back({p.fd.get(), POLLIN, 0});
    wake = wake.earlier(p.deadline);
  }
  for (;;) {
    if (abortFlag_ != nullptr && abortFlag_->load(std::memory_order_relaxed)) {
      return Status(weftRemoteError, "the communicator was aborted");
    }
    if (deadline.expired()) return Status(weftTimeout, "timed out waiting to accept a connection");
    const int n = ::poll(fds.data(), fds.size(), wake.remainingMs(kAbortSliceMs));
    if (n > 0 || wake.expired()) break;
    if (n < 0 && errno != EINTR) return Status(weftSystemError, "poll: " + errnoString(errno));
  }
  acceptReady();
  readHellos();
  return Status::ok();
}

void PeerMesh::acceptReady() {
  std::vector<int> listeners{listenFd_.get()};
  for (const auto& fd : railListenFds_) listeners.push_back(fd.get());
  // At most a full table's worth per look, so that a flood of connections cannot keep this
  // rank from its deadline and abort checks.
  size_t accepted = 0;
  for (int listener : listeners) {
    while (accepted < kMaxPendingHellos) {
      PendingHello p{{}, {}, {}, 0, Deadline::afterMs(kHelloDeadlineMs)};
      auto fd = transport::acceptNow(listener, &p.from);
      if (!fd.isOk()) {
        // Out of descriptors, say: the connection stays queued and the listener readable, so
        // pause before the next look rather than spin.
        if (acceptError_.empty()) WEFT_WARN("rank %d: %s; retrying", rank_, fd.status().message().c_str());
        acceptError_ = fd.status().message();
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        return;
      }
      if (!fd.value().valid()) break;  // none left on this listener
      ++accepted;
      p.fd = fd.take();
      // A peer sends its hello right after connecting: it is mostly here already, and then the
      // connection never waits among strangers.
      if (readHello(p)) continue;
      if (pending_.size() >= kMaxPendingHellos) {  // a flood: the flooding host's oldest makes room
        const size_t victim = connectionToEvict(pending_);
        WEFT_WARN("rank %d: %zu connections without a hello; dropped the one from %s", rank_, pending_.size(),
                  pending_[victim].from.toString().c_str());
        pending_.erase(pending_.begin() + static_cast<long>(victim));
      }
      pending_.push_back(std::move(p));
    }
  }
}

void PeerMesh::readHellos() {
  std::erase_if(pending_, [this](PendingHello& p) { return readHello(p); });
}

bool PeerMesh::readHello(PendingHello& p) {
  ssize_t n = ::recv(p.fd.get(), reinterpret_cast<char*>(&p.hello) + p.received, sizeof(p.hello) - p.received, 0);
  if (n > 0) p.received += static_cast<size_t>(n);
  const bool closed = n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  const char* why = nullptr;
  if (p.received == sizeof(p.hello)) {
    why = peerHelloProblem(p.hello, secret_, rank_, streamsByRank_);
    if (why == nullptr && connections_[static_cast<size_t>(p.hello.fromRank)]) why = "a duplicate connection";
  } else if (closed) {
    why = "closed before its hello";
  } else if (p.deadline.expired()) {
    why = "no hello in time";
  } else {
    return false;  // more to come
  }
  if (why != nullptr) {
    WEFT_WARN("rank %d: dropped a connection from %s: %s", rank_, p.from.toString().c_str(), why);
    return true;
  }
  auto& streams = arrived_[p.hello.fromRank];
  streams.resize(static_cast<size_t>(p.hello.streams));
  if (streams[p.hello.stream].valid()) {
    WEFT_WARN("rank %d: dropped a duplicate stream %u from %s", rank_, p.hello.stream,
              describe(p.hello.fromRank).c_str());
  } else {
    streams[p.hello.stream] = std::move(p.fd);
  }
  return true;
}

}  // namespace weft::core
