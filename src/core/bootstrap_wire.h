// Fixed-size messages of the bootstrap protocol. Fixed sizes mean nothing is ever allocated
// from a length a peer sent; every field is validated before use.
#pragma once

#include <cstdint>

#include "transport/socket/socket_util.h"

namespace weft::core {

constexpr uint32_t kHelloMagic = 0x4c454857;  // "WHEL"
constexpr uint32_t kReplyMagic = 0x50455257;  // "WREP"
constexpr uint32_t kPeerHelloMagic = 0x48505746;  // "FWPH"
constexpr uint16_t kProtocolVersion = 1;
constexpr int kMaxRanks = 1 << 20;
constexpr int kHostNameBytes = 64;

// A rank introduces itself to the root.
struct RankHello {
  uint32_t magic;
  uint16_t version;
  uint16_t reserved;
  uint8_t secret[32];
  int32_t rank;
  int32_t nranks;
  int32_t timeoutMs;
  uint32_t pid;
  uint64_t hostHash;
  transport::WireAddress listen;
  char hostName[kHostNameBytes];
};

// What every rank learns about every other.
struct PeerRecord {
  transport::WireAddress listen;
  uint32_t pid;
  uint32_t reserved;
  uint64_t hostHash;
  char hostName[kHostNameBytes];
};

// The root's answer: on success followed by nranks PeerRecords.
struct RootReply {
  uint32_t magic;
  int32_t result;   // weftResult_t
  int32_t nranks;
  uint32_t reserved;
  char message[256];
};

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

}  // namespace weft::core
