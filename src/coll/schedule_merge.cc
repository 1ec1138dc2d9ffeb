#include "coll/schedule_merge.h"

#include <algorithm>

namespace weft::coll {

namespace {

// Appends `part` to `out`, its regions moved by `remap`, its steps serving `operation`.
template <typename Remap>
void append(Schedule& out, std::vector<std::vector<uint32_t>>& sendOrder, std::vector<std::vector<uint32_t>>& recvOrder,
            const Schedule& part, uint32_t operation, Remap remap) {
  auto peerSlot = [&](int peer) {
    auto it = std::find(out.peers.begin(), out.peers.end(), peer);
    if (it != out.peers.end()) return static_cast<int>(it - out.peers.begin());
    out.peers.push_back(peer);
    sendOrder.emplace_back();
    recvOrder.emplace_back();
    return static_cast<int>(out.peers.size() - 1);
  };
  const auto stepBase = static_cast<uint32_t>(out.steps.size());
  const auto successorBase = static_cast<uint32_t>(out.successors.size());
  for (Step step : part.steps) {
    step.operation = operation;
    step.dst = remap(step.dst);
    step.src = remap(step.src);
    step.src2 = remap(step.src2);
    step.firstSuccessor += successorBase;
    if (step.peer >= 0) step.peerSlot = peerSlot(step.peer);
    if (step.forwardPeer >= 0) step.forwardSlot = peerSlot(step.forwardPeer);
    out.steps.push_back(step);
  }
  for (uint32_t successor : part.successors) out.successors.push_back(successor + stepBase);
  for (size_t p = 0; p < part.peers.size(); ++p) {
    const auto slot = static_cast<size_t>(peerSlot(part.peers[p]));
    for (uint32_t s : part.sendOrder[p]) sendOrder[slot].push_back(s + stepBase);
    for (uint32_t s : part.recvOrder[p]) recvOrder[slot].push_back(s + stepBase);
  }
  out.scratchBytes += (part.scratchBytes + 63) / 64 * 64;
  out.forwards += part.forwards;
}

}  // namespace

Schedule concatenateParts(const std::vector<Schedule>& parts, const std::vector<size_t>& byteOffsets) {
  Schedule out;
  out.algorithm = parts.empty() ? "" : parts.front().algorithm;
  std::vector<std::vector<uint32_t>> sendOrder, recvOrder;
  for (size_t i = 0; i < parts.size(); ++i) {
    const size_t scratchBase = out.scratchBytes;
    append(out, sendOrder, recvOrder, parts[i], 0, [&](Region region) {
      return Region{region.buffer, region.offset + (region.buffer == Buffer::Scratch ? scratchBase : byteOffsets[i])};
    });
  }
  out.sendOrder = std::move(sendOrder);
  out.recvOrder = std::move(recvOrder);
  return out;
}

Schedule mergeSchedules(const std::vector<const Schedule*>& parts) {
  Schedule out;
  out.algorithm = "group";
  std::vector<std::vector<uint32_t>> sendOrder, recvOrder;
  for (size_t op = 0; op < parts.size(); ++op) {
    const size_t scratchBase = out.scratchBytes;
    append(out, sendOrder, recvOrder, *parts[op], static_cast<uint32_t>(op), [&](Region region) {
      if (region.buffer == Buffer::Scratch) return Region{Buffer::Scratch, region.offset + scratchBase};
      return Region{region.buffer == Buffer::Send ? Buffer::send(op) : Buffer::recv(op), region.offset};
    });
  }
  out.sendOrder = std::move(sendOrder);
  out.recvOrder = std::move(recvOrder);
  return out;
}

}  // namespace weft::coll
