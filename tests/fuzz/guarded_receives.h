// What the transport fuzz targets share: receives posted into buffers with a poisoned guard
// after each, driven by the connection's progress until they complete, it fails, or it stalls
// (with stopWhenIdle: a round that moved nothing), then the guards checked: a
// write past a receive buffer traps.
#pragma once

#include <cstdint>
#include <vector>

#include "transport/transport.h"

namespace weft::fuzz {

inline void receiveGuarded(transport::Connection& connection, const uint16_t (&sizes)[2], transport::MessageTag tag,
                           int maxRounds, bool stopWhenIdle) {
  constexpr size_t kGuard = 64;
  constexpr uint8_t kPoison = 0xA5;
  std::vector<std::vector<uint8_t>> buffers;
  for (uint16_t bytes : sizes) {
    buffers.emplace_back(bytes + kGuard, kPoison);
    transport::RequestId id;
    if (!connection.postRecv(buffers.back().data(), bytes, tag, &id).isOk()) return;
  }
  for (int round = 0; round < maxRounds && connection.completedRecvs() < 2; ++round) {
    bool progressed = false;
    if (!connection.progress(&progressed).isOk() || (stopWhenIdle && !progressed)) break;
  }
  for (size_t b = 0; b < buffers.size(); ++b) {
    for (size_t g = 0; g < kGuard; ++g) {
      if (buffers[b][sizes[b] + g] != kPoison) __builtin_trap();
    }
  }
}

}  // namespace weft::fuzz
