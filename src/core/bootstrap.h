// Bootstrap: every rank meets the others through the root named in the unique id. A rank
// proves the id's secret, says where it listens and which host it runs on, and receives the
// same facts about every rank. Strangers and garbage are dropped without disturbing the job.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "core/rails.h"
#include "core/unique_id.h"
#include "plan/placement.h"
#include "transport/socket/socket_util.h"

namespace weft::core {

struct PeerInfo {
  transport::SocketAddress listen;
  RailAddresses rails;  // where it listens on each NIC of its host (core/rails.h)
  std::string hostName;
  uint64_t hostHash = 0;  // equal on ranks that share a host (same boot id and hostname)
  uint32_t pid = 0;
  uint32_t pidNamespace = 0;  // where its pid means it (transport::pidNamespaceId); 0 unknown
  uint16_t settingsDigest = 0;  // see joinRendezvous
  plan::RankPlacement placement;  // .host is not on the wire: the planner derives it from hostHash
};
// Every rank keeps one for every rank (docs/architecture.md gives the size at 64K ranks).
static_assert(sizeof(PeerInfo) <= 392);

struct Rendezvous {
  std::vector<PeerInfo> peers;
  transport::UniqueFd listenFd;  // where this rank accepts its peers' connections
  std::vector<transport::UniqueFd> railListenFds;  // and on its other NICs
};

// Starts a root on `bindAddress` (port 0 picks one) in a background thread that serves one
// rendezvous and then exits, or gives up: after `lifetimeMs` if no rank comes, else 90% of the
// first rank's timeout after its hello, without a full set of ranks. Once every rank has joined
// it stops listening and removes `idFile` (if not empty), before it answers any rank: a rank
// that re-initializes at once then meets the next root, never this one or its id.
Status startBootstrapRoot(const transport::SocketAddress& bindAddress, const Secret& secret, int lifetimeMs,
                          transport::SocketAddress* bound, std::string idFile = {});

// Joins the rendezvous of `id` as `rank` of `nranks`, telling the others where it sits, where it
// listens (on each of `host`'s NICs too) and a digest of the settings all ranks must share.
Result<Rendezvous> joinRendezvous(const UniqueIdContents& id, int rank, int nranks, int timeoutMs,
                                  const plan::RankPlacement& placement, const topo::HostTopology& host,
                                  uint16_t settingsDigest, const std::atomic<bool>* abortFlag);

// This host's identity: hostname and kernel boot id, hashed.
uint64_t localHostHash();
std::string localHostName();

}  // namespace weft::core
