// Fixed-size messages of the bootstrap protocol. Fixed sizes mean nothing is ever allocated
// from a length a peer sent; every field is validated before use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/rails.h"
#include "core/unique_id.h"
#include "plan/placement.h"
#include "transport/socket/socket_util.h"
#include "util/status.h"

namespace weft::core {

constexpr uint32_t kHelloMagic = 0x4c454857;  // "WHEL"
constexpr uint32_t kReplyMagic = 0x50455257;  // "WREP"
constexpr uint32_t kPeerHelloMagic = 0x48505746;  // "FWPH"
constexpr uint16_t kProtocolVersion = 8;  // 8: the placement's L2 and cores
constexpr int kMaxRanks = 1 << 20;
constexpr int kHostNameBytes = 64;

// Where a rank sits on its host, for the planner (plan/placement.h); -1 where unknown or none.
struct WirePlacement {
  int16_t numaNode;
  int16_t gpu;
  int16_t preferredNic;
  int16_t nicCount;
  int16_t cpus;  // CPUs its host lets it use; 0 unknown
  int16_t flags;  // kPlacementNoSharedMemory, kPlacementSharedMemoryOnly
  uint32_t cacheKiB;  // its host's last-level cache; 0 unknown
  uint32_t privateCacheKiB;  // its host's L2 a core where an L3 lies beyond it; 0 unknown or none
  int16_t cores;  // cores its host lets it use; 0 unknown
  int16_t reserved;
};
constexpr int16_t kPlacementNoSharedMemory = 1;  // the rank keeps all its pairs on sockets
constexpr int16_t kPlacementSharedMemoryOnly = 2;  // the rank's pairs must all use shared memory

// A rank introduces itself to the root.
struct RankHello {
  uint32_t magic;
  uint16_t version;
  uint16_t settingsDigest;  // of the settings every rank must share (coll::settingsDigest)
  uint8_t secret[32];
  int32_t rank;
  int32_t nranks;
  int32_t timeoutMs;
  uint32_t pid;
  uint64_t hostHash;
  transport::WireAddress listen;
  transport::WireAddress rails[kMaxRails];  // per NIC of its host (core/rails.h); family 0: none
  char hostName[kHostNameBytes];
  WirePlacement placement;
  uint32_t pidNamespace;  // transport::pidNamespaceId(); 0 unknown
};

// The bytes of a RankHello that every protocol version lays out alike (magic, version, settings
// digest, secret), so that a root can tell a rank of another version that it is one.
constexpr size_t kHelloVersionedPrefix = 40;
static_assert(offsetof(RankHello, rank) == kHelloVersionedPrefix);

// What every rank learns about every other.
struct PeerRecord {
  transport::WireAddress listen;
  transport::WireAddress rails[kMaxRails];
  uint32_t pid;
  uint32_t settingsDigest;  // the rank's hello's
  uint32_t pidNamespace;    // the rank's hello's
  uint64_t hostHash;
  char hostName[kHostNameBytes];
  WirePlacement placement;
};

// The layouts tests/fuzz/make_seeds.py writes (LP64); a change here is a new protocol version,
// unless it only puts a field where there was padding, which older ranks send as 0.
static_assert(sizeof(WirePlacement) == 24 && sizeof(RankHello) == 336 && sizeof(PeerRecord) == 288);

// The root's answer: on success followed by nranks PeerRecords.
struct RootReply {
  uint32_t magic;
  int32_t result;   // weftResult_t, or kReplyTryAgain
  int32_t nranks;
  uint32_t reserved;
  char message[256];
};

// From a root whose rendezvous failed to a rank that had been told so and came again: the job
// is retrying with the same id; the rank connects again until the new root has taken the port.
// New in protocol version 6.
constexpr int32_t kReplyTryAgain = -1;

// First bytes on every rank-to-rank stream.
struct PeerHello {
  uint32_t magic;
  uint16_t version;
  uint16_t stream;
  uint8_t secret[32];
  int32_t fromRank;
  int32_t toRank;
  int32_t streams;
  uint32_t reserved;
};

// Checks on what a peer sent, before anything is done with it. Each is a pure function of the
// bytes received (tests/fuzz/ drives them with arbitrary input).

// Why the root drops a RankHello (not Weft's, another version, the wrong secret); "" when it
// proves the secret. Fields the root then trusts are checked by rankHelloFieldsProblem.
std::string rankHelloProblem(const RankHello& hello, const Secret& secret);
// Why a hello with the right secret cannot join (rank or nranks out of range); "" when it can.
std::string rankHelloFieldsProblem(const RankHello& hello);

// The root's answer for a rank expecting `nranks` ranks: ok when it admits the rank, else the
// error it carries (or says why it is malformed). `where` names the root for messages.
Status checkRootReply(const RootReply& reply, int nranks, const std::string& where);

// A rank's placement as its hello carries it (.host is not sent: the planner derives it), each
// count clamped to what the field holds.
WirePlacement toWire(const plan::RankPlacement& placement);

struct PeerInfo;
// The table of peers that follows a successful RootReply.
Result<std::vector<PeerInfo>> decodePeerRecords(std::span<const PeerRecord> records, const std::string& where);

// Why a rank drops an incoming peer stream: not a Weft peer, the wrong secret, or ranks and
// stream numbers that cannot be (only lower ranks connect to `myRank`; each pair has its
// streamsByRank[peer] streams); nullptr when it is fine.
const char* peerHelloProblem(const PeerHello& hello, const Secret& secret, int myRank,
                             std::span<const int> streamsByRank);

}  // namespace weft::core
