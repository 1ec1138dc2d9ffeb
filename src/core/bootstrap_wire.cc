#include "core/bootstrap_wire.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>

#include "core/bootstrap.h"

namespace weft::core {

std::string rankHelloProblem(const RankHello& h, const Secret& secret) {
  if (h.magic != kHelloMagic) return "not a Weft hello";
  if (h.version != kProtocolVersion) return formatString("protocol version %u, expected %u", h.version, kProtocolVersion);
  if (!transport::constantTimeEqual(h.secret, secret.data(), secret.size())) return "wrong secret (a stale or forged id?)";
  return "";
}

std::string rankHelloFieldsProblem(const RankHello& h) {
  if (h.nranks < 1 || h.nranks > kMaxRanks || h.rank < 0 || h.rank >= h.nranks) {
    std::string host(h.hostName, strnlen(h.hostName, sizeof(h.hostName)));
    return formatString("a rank on %s claimed rank %d of %d", host.c_str(), h.rank, h.nranks);
  }
  return "";
}

Status checkRootReply(const RootReply& reply, int nranks, const std::string& where) {
  if (reply.magic != kReplyMagic) return Status(weftRemoteError, "the " + where + " sent a malformed reply");
  if (reply.result != weftSuccess) {
    std::string message(reply.message, strnlen(reply.message, sizeof(reply.message)));
    weftResult_t code = reply.result > 0 && reply.result < weftNumResults ? static_cast<weftResult_t>(reply.result)
                                                                          : weftRemoteError;
    return Status(code, message);
  }
  if (reply.nranks != nranks) {
    return Status(weftRemoteError, formatString("the %s answered for %d ranks, expected %d", where.c_str(), reply.nranks, nranks));
  }
  return Status::ok();
}

WirePlacement toWire(const plan::RankPlacement& p) {
  auto kib = [](size_t bytes) { return static_cast<uint32_t>(std::min<size_t>(bytes >> 10, UINT32_MAX)); };
  auto count = [](int n) { return static_cast<int16_t>(std::min(n, int{INT16_MAX})); };
  return {static_cast<int16_t>(p.numaNode),
          static_cast<int16_t>(p.gpu),
          static_cast<int16_t>(p.preferredNic),
          static_cast<int16_t>(p.nicCount),
          count(p.cpus),
          static_cast<int16_t>((p.sharedMemory ? 0 : kPlacementNoSharedMemory) |
                               (p.sharedMemoryOnly ? kPlacementSharedMemoryOnly : 0)),
          kib(p.cacheBytes),
          kib(p.privateCacheBytes),
          count(p.cores),
          0};
}

Result<std::vector<PeerInfo>> decodePeerRecords(std::span<const PeerRecord> records, const std::string& where) {
  std::vector<PeerInfo> peers(records.size());
  for (size_t r = 0; r < records.size(); ++r) {
    auto address = transport::fromWire(records[r].listen);
    if (!address.isOk()) return address.status().withContext(where);
    peers[r].listen = address.value();
    for (int nic = 0; nic < kMaxRails; ++nic) {
      if (records[r].rails[nic].family == 0) continue;  // no rail on that NIC
      auto rail = transport::fromWire(records[r].rails[nic]);
      if (!rail.isOk()) return rail.status().withContext(where + formatString(" (rank %zu's NIC %d)", r, nic));
      peers[r].rails[static_cast<size_t>(nic)] = rail.value();
    }
    peers[r].pid = records[r].pid;
    peers[r].pidNamespace = records[r].pidNamespace;
    peers[r].hostHash = records[r].hostHash;
    peers[r].settingsDigest = static_cast<uint16_t>(records[r].settingsDigest);
    peers[r].hostName.assign(records[r].hostName, strnlen(records[r].hostName, sizeof(records[r].hostName)));
    // Out-of-range values mean "unknown": the planner only ever compares them.
    const WirePlacement& w = records[r].placement;
    auto clamp = [](int16_t v) { return v < -1 ? -1 : static_cast<int>(v); };
    peers[r].placement.numaNode = clamp(w.numaNode);
    peers[r].placement.gpu = clamp(w.gpu);
    peers[r].placement.preferredNic = w.preferredNic >= 0 && w.preferredNic < w.nicCount ? w.preferredNic : -1;
    peers[r].placement.nicCount = w.nicCount > 0 ? w.nicCount : 0;
    peers[r].placement.cpus = w.cpus > 0 ? w.cpus : 0;
    peers[r].placement.sharedMemory = (w.flags & kPlacementNoSharedMemory) == 0;
    peers[r].placement.sharedMemoryOnly = (w.flags & kPlacementSharedMemoryOnly) != 0;
    peers[r].placement.cacheBytes = static_cast<size_t>(w.cacheKiB) << 10;
    peers[r].placement.privateCacheBytes = static_cast<size_t>(w.privateCacheKiB) << 10;
    peers[r].placement.cores = w.cores > 0 ? w.cores : 0;
  }
  return peers;
}

const char* peerHelloProblem(const PeerHello& hello, const Secret& secret, int myRank,
                             std::span<const int> streamsByRank) {
  if (hello.magic != kPeerHelloMagic || hello.version != kProtocolVersion) return "not a Weft peer";
  if (!transport::constantTimeEqual(hello.secret, secret.data(), secret.size())) return "wrong secret";
  const auto nranks = static_cast<int>(streamsByRank.size());
  if (hello.toRank != myRank || hello.fromRank < 0 || hello.fromRank >= myRank || hello.fromRank >= nranks) {
    return "inconsistent ranks";
  }
  const int streams = streamsByRank[static_cast<size_t>(hello.fromRank)];
  if (hello.streams != streams || hello.stream >= streams) return "inconsistent stream counts";
  return nullptr;
}

}  // namespace weft::core
