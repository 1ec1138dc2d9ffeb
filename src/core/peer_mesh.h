// Connections to every peer, made together on first use. For each pair, the lower rank connects
// and the higher rank accepts; connections that arrive for another peer wait until asked for, and
// connections that do not prove the secret are dropped and logged.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "coll/executor.h"
#include "core/bootstrap.h"
#include "core/bootstrap_wire.h"
#include "plan/planner.h"
#include "transport/shm/shm_setup.h"
#include "transport/transport.h"

namespace weft::core {

struct StreamRoute;  // core/rails.h

class PeerMesh final : public coll::ConnectionProvider {
 public:
  // transports: the planner's choice for each peer (shared memory is still negotiated: either
  // side may decline, and then the pair stays on sockets). channelNics: per peer, the NICs of
  // each channel between the pair (plan::channelNics), over which its socket streams spread.
  PeerMesh(int rank, Rendezvous rendezvous, const Secret& secret, int streamsPerPeer,
           const transport::ShmOptions& shm, std::vector<plan::Transport> transports,
           std::vector<std::vector<std::pair<int, int>>> channelNics, const std::atomic<bool>* abortFlag);

  // The connection to `peer`, set up on first use (both ranks of the pair must ask for it).
  Result<transport::Connection*> connection(int peer, const Deadline& deadline) override;
  // Connects every pair (once; later calls return at once). Collective: all ranks call it.
  Status connectAll(const Deadline& deadline);
  // Connects this rank to each of `peers` (point-to-point), in the order that cannot deadlock
  // when every pair's two ranks both ask for it.
  Status connectPeers(std::vector<int> peers, const Deadline& deadline);

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(peers_.size()); }
  const PeerInfo& peer(int rank) const { return peers_[static_cast<size_t>(rank)]; }
  // A digest of the job's secret, for naming this job's shared-memory segments.
  uint32_t secretDigest() const { return static_cast<uint32_t>(fnv1a64(secret_.data(), secret_.size())); }
  // "rank 3 (host, pid 1234)" for error messages.
  std::string describe(int rank) const override;

 private:
  // Raises the limit on open files where the streams to those of `peers` not connected yet
  // would not fit under it (transport/socket/descriptor_limit.h).
  void makeRoomForStreams(std::span<const int> peers) const;
  Status connectTo(int peer, const Deadline& deadline);
  // One stream of the pair, on its rail where it has one, else (or where the rail fails) to the
  // peer's main address; *onRail says which.
  Result<transport::UniqueFd> connectStream(int peer, const StreamRoute& route, const Deadline& deadline,
                                            bool* onRail);
  Status acceptFrom(int peer, const Deadline& deadline);
  // Waits for new connections and for hellos on those accepted, and files each connection whose
  // hello is complete under the peer it proves to be; returns once something has changed, or
  // one of `watch` (streams already filed) hangs up.
  Status acceptAndSort(const Deadline& deadline, const std::vector<int>& watch);
  void acceptReady();  // every connection the listeners hold now
  void readHellos();   // what has arrived of each pending hello
  struct PendingHello;
  // Reads what has arrived of p's hello; true when p is done with (filed under its peer, or
  // dropped), false while its hello is still to come.
  bool readHello(PendingHello& p);
  // Shared memory for a peer on this host (unless disabled or unavailable), else the streams.
  Status adopt(int peer, std::vector<transport::UniqueFd> streams, const Deadline& deadline);

  int rank_;
  std::vector<PeerInfo> peers_;
  transport::UniqueFd listenFd_;
  std::vector<transport::UniqueFd> railListenFds_;
  Secret secret_;
  int streamsPerPeer_;
  std::vector<std::vector<std::pair<int, int>>> channelNics_;  // by peer
  std::vector<int> streamsByRank_;  // the socket streams of each pair (core/rails.h)
  transport::ShmOptions shm_;
  std::vector<plan::Transport> transports_;
  const std::atomic<bool>* abortFlag_;
  std::vector<std::unique_ptr<transport::Connection>> connections_;
  // An accepted connection whose hello has not arrived in full. Each waits on its own, so a
  // connection that never speaks holds up nobody.
  struct PendingHello {
    transport::UniqueFd fd;
    transport::SocketAddress from;
    PeerHello hello{};
    size_t received = 0;
    Deadline deadline = Deadline::never();
  };
  std::vector<PendingHello> pending_;
  std::string acceptError_;  // why accept last failed (out of descriptors, say); warned once
  std::map<int, std::vector<transport::UniqueFd>> arrived_;  // accepted streams by peer, in stream order
  bool connected_ = false;  // connectAll has run
  std::set<int> brokenRails_;  // local NICs whose rail could not connect (see connectStream)
};

}  // namespace weft::core
