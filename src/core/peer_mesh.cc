#include "core/peer_mesh.h"

#include <algorithm>
#include <cstring>

#include "core/bootstrap_wire.h"
#include "transport/socket/socket_connection.h"
#include "util/log.h"

namespace weft::core {

using transport::UniqueFd;

namespace {
constexpr int kHelloDeadlineMs = 5000;  // an accepted connection must introduce itself this fast
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

Status PeerMesh::connectPeers(std::vector<int> peers, const Deadline& deadline) {
  std::sort(peers.begin(), peers.end());  // the global pair order, restricted to these pairs
  for (int peer : peers) WEFT_TRY(connection(peer, deadline).status());
  return Status::ok();
}

// Setting up a pair is a blocking handshake on both sides (shared-memory setup in particular),
// so pairs are taken in one global order, by (higher rank, lower rank): the earliest pair not
// yet done always has both of its ranks working on it, so no cycle of waits can form. Visiting
// peers in ascending rank order follows that order, for all peers or any subset of them.
Status PeerMesh::connectAll(const Deadline& deadline) {
  if (connected_) return Status::ok();
  for (int peer = 0; peer < size(); ++peer) {
    if (peer != rank_) WEFT_TRY(connection(peer, deadline).status());
  }
  connected_ = true;
  return Status::ok();
}

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
    return transport::connectTo(route.source == nullptr ? route.destination : main, deadline, abortFlag_);
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
  return transport::connectTo(main, deadline, abortFlag_);
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
    Status s = acceptAndSort(deadline);
    if (s.code() == weftTimeout) {
      return Status(weftTimeout, describe(peer) + " never connected before the timeout");
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
  if (!slot) slot = std::make_unique<transport::SocketConnection>(peer, info.hostName, std::move(streams));
  WEFT_INFO("rank %d: %s connection to %s", rank_, slot->kind(), describe(peer).c_str());
  return Status::ok();
}

// Accepts one connection and files it under the peer it proves to be.
Status PeerMesh::acceptAndSort(const Deadline& deadline) {
  transport::SocketAddress from;
  std::vector<int> listeners{listenFd_.get()};
  for (const auto& fd : railListenFds_) listeners.push_back(fd.get());
  WEFT_ASSIGN_OR_RETURN(UniqueFd fd, transport::acceptAny(listeners, deadline, abortFlag_, &from));
  PeerHello hello{};
  Status got = transport::recvAll(fd.get(), &hello, sizeof(hello),
                                  deadline.earlier(Deadline::afterMs(kHelloDeadlineMs)), abortFlag_);
  const std::string noHello = "no hello: " + got.message();
  const char* why = !got.isOk() ? noHello.c_str() : peerHelloProblem(hello, secret_, rank_, streamsByRank_);
  if (why == nullptr && connections_[static_cast<size_t>(hello.fromRank)]) why = "a duplicate connection";
  if (why != nullptr) {
    WEFT_WARN("rank %d: dropped a connection from %s: %s", rank_, from.toString().c_str(), why);
    return Status::ok();
  }
  auto& streams = arrived_[hello.fromRank];
  streams.resize(static_cast<size_t>(hello.streams));
  if (streams[hello.stream].valid()) {
    WEFT_WARN("rank %d: dropped a duplicate stream %u from %s", rank_, hello.stream, describe(hello.fromRank).c_str());
    return Status::ok();
  }
  streams[hello.stream] = std::move(fd);
  return Status::ok();
}

}  // namespace weft::core
