// Fuzz target: the checks the bootstrap root and the ranks apply to what arrives from the
// network (RankHello at the root; RootReply and the PeerRecord table at a rank; PeerHello on
// every rank-to-rank stream). Input: one flag byte, then the messages' bytes in that order.
// Flag bit 0 plants the right secret in both hellos, so the checks past the secret are reached.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/bootstrap.h"
#include "core/bootstrap_wire.h"

using namespace weft::core;

namespace {
// Takes the next sizeof(T) bytes (zero-padded past the end).
template <typename T>
T take(const uint8_t*& data, size_t& size) {
  T value{};
  const size_t n = std::min(size, sizeof(T));
  std::memcpy(&value, data, n);
  data += n;
  size -= n;
  return value;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t flags = *data++;
  --size;
  Secret secret{};
  for (size_t i = 0; i < secret.size(); ++i) secret[i] = static_cast<uint8_t>(i * 7 + 1);

  auto hello = take<RankHello>(data, size);
  if (flags & 1) std::memcpy(hello.secret, secret.data(), secret.size());
  if (rankHelloProblem(hello, secret).empty()) (void)rankHelloFieldsProblem(hello);

  const auto reply = take<RootReply>(data, size);
  const int nranks = static_cast<int>(std::min<size_t>(size / sizeof(PeerRecord), 64));
  if (checkRootReply(reply, nranks, "fuzzed root").isOk()) {
    std::vector<PeerRecord> records(static_cast<size_t>(nranks));
    for (auto& record : records) record = take<PeerRecord>(data, size);
    auto peers = decodePeerRecords(records, "fuzzed root");
    if (peers.isOk() && peers.value().size() != records.size()) __builtin_trap();
  }

  auto peerHello = take<PeerHello>(data, size);
  if (flags & 1) std::memcpy(peerHello.secret, secret.data(), secret.size());
  // 8 ranks; the pair with rank 1 has 4 streams (rails), the others 2.
  const int streamsByRank[8] = {2, 4, 2, 2, 2, 2, 2, 2};
  const char* why = peerHelloProblem(peerHello, secret, /*myRank=*/3, streamsByRank);
  // Whatever passes must be safe to index with.
  if (why == nullptr && (peerHello.fromRank < 0 || peerHello.fromRank >= 3 ||
                         peerHello.stream >= streamsByRank[peerHello.fromRank])) {
    __builtin_trap();
  }
  return 0;
}
