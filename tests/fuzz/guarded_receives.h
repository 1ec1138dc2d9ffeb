// What the transport fuzz targets share: receives posted into buffers with a poisoned guard
// after each, driven by the connection's progress until they complete, it fails, or it stalls
// (with stopWhenIdle: a round that moved nothing), then the guards checked: a
// write past a receive buffer traps.
#pragma once

#include <cstdint>
#include <vector>

#include "transport/transport.h"

namespace weft::fuzz {

// With `forwardTo`, each receive is a forwarding one (a float sum on receipt when `reduce`)
// whose send goes out through forwardTo: what a ring's middle rank does with its peer's bytes.
inline void receiveGuarded(transport::Connection& connection, const uint16_t (&sizes)[2], transport::MessageTag tag,
                           int maxRounds, bool stopWhenIdle, transport::Connection* forwardTo = nullptr,
                           bool reduce = false) {
  constexpr size_t kGuard = 64;
  constexpr uint8_t kPoison = 0xA5;
  std::vector<std::vector<uint8_t>> buffers;
  std::vector<uint8_t> local(65536 + kGuard, 0);
  transport::Forward forwards[2];
  for (size_t i = 0; i < 2; ++i) {
    const uint16_t bytes = sizes[i];
    buffers.emplace_back(bytes + kGuard, kPoison);
    transport::RequestId id;
    if (forwardTo == nullptr) {
      if (!connection.postRecv(buffers.back().data(), bytes, tag, &id).isOk()) return;
      continue;
    }
    transport::Connection::ForwardedRecv recv{.dst = buffers.back().data(),
                                              .local = reduce ? local.data() : nullptr,
                                              .bytes = bytes,
                                              .spec = {weftFloat32, weftSum, 4},
                                              .keepDestination = (i == 0),
                                              .to = forwardTo,
                                              .forward = &forwards[i]};
    if (!forwardTo->postForwardedSend(buffers.back().data(), bytes, tag, &forwards[i], &id).isOk()) return;
    if (!connection.postForwardedRecv(recv, tag, &id).isOk()) return;
  }
  for (int round = 0; round < maxRounds && connection.completedRecvs() < 2; ++round) {
    bool progressed = false;
    if (!connection.progress(&progressed).isOk()) break;
    if (forwardTo != nullptr && forwardTo != &connection && !forwardTo->progress(&progressed).isOk()) break;
    if (stopWhenIdle && !progressed) break;
  }
  for (size_t b = 0; b < buffers.size(); ++b) {
    for (size_t g = 0; g < kGuard; ++g) {
      if (buffers[b][sizes[b] + g] != kPoison) __builtin_trap();
    }
  }
}

}  // namespace weft::fuzz
