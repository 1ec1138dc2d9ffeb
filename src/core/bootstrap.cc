// The rank side of the bootstrap: listen for peers, say hello to the root, read the table.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <thread>

#include "core/bootstrap.h"
#include "core/bootstrap_wire.h"
#include "transport/process_liveness.h"
#include "transport/socket/interface_select.h"
#include "util/log.h"

namespace weft::core {

using transport::SocketAddress;
using transport::UniqueFd;

std::string localHostName() {
  char name[kHostNameBytes] = {};
  ::gethostname(name, sizeof(name) - 1);
  return name;
}

uint64_t localHostHash() {
  std::string identity = localHostName();
  std::ifstream bootId("/proc/sys/kernel/random/boot_id");
  std::string line;
  if (std::getline(bootId, line)) identity += "/" + line;
  return fnv1a64(identity.data(), identity.size());
}

Result<Rendezvous> joinRendezvous(const UniqueIdContents& id, int rank, int nranks, int timeoutMs,
                                  const plan::RankPlacement& placement, const topo::HostTopology& host,
                                  uint16_t settingsDigest, const std::atomic<bool>* abortFlag) {
  Deadline deadline = Deadline::afterMs(timeoutMs);
  Rendezvous out;

  WEFT_ASSIGN_OR_RETURN(SocketAddress listenAddress, transport::chooseListenAddress(id.root, id.spansHosts));
  SocketAddress bound;
  WEFT_ASSIGN_OR_RETURN(out.listenFd, transport::listenOn(listenAddress, &bound));
  WEFT_ASSIGN_OR_RETURN(RailListeners rails, listenOnRails(host, bound));
  out.railListenFds = std::move(rails.fds);

  RankHello hello{};
  hello.magic = kHelloMagic;
  hello.version = kProtocolVersion;
  hello.settingsDigest = settingsDigest;
  std::memcpy(hello.secret, id.secret.data(), sizeof(hello.secret));
  hello.rank = rank;
  hello.nranks = nranks;
  hello.timeoutMs = timeoutMs;
  hello.pid = static_cast<uint32_t>(::getpid());
  hello.pidNamespace = transport::pidNamespaceId();
  hello.hostHash = localHostHash();
  hello.listen = transport::toWire(bound);
  for (int nic = 0; nic < kMaxRails; ++nic) {
    if (rails.addresses[nic].length > 0) hello.rails[nic] = transport::toWire(rails.addresses[nic]);
  }
  std::snprintf(hello.hostName, sizeof(hello.hostName), "%s", localHostName().c_str());
  hello.placement = toWire(placement);

  const std::string where = "bootstrap root " + id.root.toString();
  UniqueFd root;
  RootReply reply{};
  bool toldToTryAgain = false;  // by a failed root making way for a retry (bootstrap_root.cc)
  for (;;) {
    if (toldToTryAgain) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    auto connected = transport::connectTo(id.root, deadline, abortFlag);
    if (!connected.isOk()) return connected.status().withContext("rank " + std::to_string(rank) + " cannot reach the " + where);
    root = connected.take();
    WEFT_TRY(transport::sendAll(root.get(), &hello, sizeof(hello), deadline, abortFlag).withContext(where));

    Status got = transport::recvAll(root.get(), &reply, sizeof(reply), deadline, abortFlag);
    if (got.code() == weftTimeout) {
      return Status(weftTimeout, formatString("rank %d timed out after %d ms waiting for the other %d rank(s) at the %s",
                                              rank, timeoutMs, nranks - 1, where.c_str()));
    }
    if (got.code() == weftRemoteError && abortFlag != nullptr && abortFlag->load()) return got;  // aborted, not lost
    if (got.code() == weftRemoteError && toldToTryAgain) continue;  // the old root going: the new one comes
    if (got.code() == weftRemoteError) {
      return Status(weftRemoteError, "the " + where + " closed the connection before answering (" + got.message() +
                                         "): its process exited, or the id is stale or belongs to another job");
    }
    WEFT_TRY(got);
    if (reply.magic != kReplyMagic || reply.result != kReplyTryAgain) break;
    toldToTryAgain = true;
  }
  WEFT_TRY(checkRootReply(reply, nranks, where));
  std::vector<PeerRecord> records(static_cast<size_t>(nranks));
  WEFT_TRY(transport::recvAll(root.get(), records.data(), records.size() * sizeof(PeerRecord), deadline, abortFlag)
               .withContext(where));
  WEFT_ASSIGN_OR_RETURN(out.peers, decodePeerRecords(records, where));
  for (PeerInfo& peer : out.peers) {
    peer.listen.scopeLike(bound);
    for (int nic = 0; nic < kMaxRails; ++nic) {
      const SocketAddress& own = rails.addresses[nic].length > 0 ? rails.addresses[nic] : bound;
      peer.rails[static_cast<size_t>(nic)].scopeLike(own);
    }
  }
  WEFT_INFO("rank %d of %d: bootstrap done, listening for peers on %s", rank, nranks, bound.toString().c_str());
  return out;
}

}  // namespace weft::core
