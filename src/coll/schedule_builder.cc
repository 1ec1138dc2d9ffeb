#include "coll/schedule_builder.h"

#include <algorithm>

namespace weft::coll {

ScheduleBuilder::RegionMap& ScheduleBuilder::regionsOf(BufferId buffer) {
  if (inPlace_ && buffer == Buffer::Send) buffer = Buffer::Recv;
  return regions_[static_cast<int>(buffer)];
}

template <typename Fn>
void ScheduleBuilder::forOverlapping(RegionMap& map, size_t begin, size_t end, Fn&& fn) {
  size_t reach = maxRegionBytes_[&map - regions_];
  auto it = map.lower_bound({begin > reach ? begin - reach : 0, 0});
  for (; it != map.end() && it->first.first < end; ++it) {
    if (it->first.second > begin) fn(it->first, it->second);
  }
}

void ScheduleBuilder::dependOn(uint32_t step, int64_t on) {
  if (on < 0 || static_cast<uint32_t>(on) == step) return;
  auto& deps = dependencies_[step];
  if (std::find(deps.begin(), deps.end(), static_cast<uint32_t>(on)) == deps.end()) {
    deps.push_back(static_cast<uint32_t>(on));
  }
}

void ScheduleBuilder::read(uint32_t step, Region region, size_t bytes) {
  if (bytes == 0) return;
  RegionMap& map = regionsOf(region.buffer);
  size_t begin = region.offset, end = region.offset + bytes;
  forOverlapping(map, begin, end, [&](auto, Access& access) { dependOn(step, access.lastWriter); });
  map[{begin, end}].readersSinceWrite.push_back(step);
  size_t& reach = maxRegionBytes_[&map - regions_];
  reach = std::max(reach, bytes);
}

void ScheduleBuilder::write(uint32_t step, Region region, size_t bytes) {
  if (bytes == 0) return;
  RegionMap& map = regionsOf(region.buffer);
  size_t begin = region.offset, end = region.offset + bytes;
  forOverlapping(map, begin, end, [&](auto, Access& access) {
    dependOn(step, access.lastWriter);
    for (uint32_t reader : access.readersSinceWrite) dependOn(step, reader);
  });
  // The region written exactly starts afresh; partially overlapping ones keep their history,
  // which can only add (redundant, backward) dependencies, never lose one.
  Access& mine = map[{begin, end}];
  mine.readersSinceWrite.clear();
  mine.lastWriter = step;
  size_t& reach = maxRegionBytes_[&map - regions_];
  reach = std::max(reach, bytes);
}

uint32_t ScheduleBuilder::add(Step step) {
  steps_.push_back(step);
  dependencies_.emplace_back();
  return static_cast<uint32_t>(steps_.size() - 1);
}

std::vector<uint32_t>& ScheduleBuilder::peerOrder(std::vector<std::vector<uint32_t>>& orders, int peer) {
  auto it = std::find(peers_.begin(), peers_.end(), peer);
  if (it == peers_.end()) {
    peers_.push_back(peer);
    sendOrder_.emplace_back();
    recvOrder_.emplace_back();
    return orders.back();
  }
  return orders[static_cast<size_t>(it - peers_.begin())];
}

uint32_t ScheduleBuilder::send(int peer, Region src, size_t bytes) {
  uint32_t id = add({.kind = StepKind::Send, .peer = peer, .src = src, .bytes = bytes});
  read(id, src, bytes);
  peerOrder(sendOrder_, peer).push_back(id);
  return id;
}

uint32_t ScheduleBuilder::recv(int peer, Region dst, size_t bytes, bool streaming) {
  uint32_t id = add({.kind = StepKind::Recv, .peer = peer, .dst = dst, .bytes = bytes, .streaming = streaming});
  write(id, dst, bytes);
  peerOrder(recvOrder_, peer).push_back(id);
  return id;
}

uint32_t ScheduleBuilder::recvReduce(int peer, Region dst, Region local, size_t elements, size_t elementSize) {
  size_t bytes = elements * elementSize;
  uint32_t id = add({.kind = StepKind::RecvReduce, .peer = peer, .dst = dst, .src = local, .bytes = bytes,
                     .elements = elements});
  read(id, local, bytes);
  write(id, dst, bytes);
  peerOrder(recvOrder_, peer).push_back(id);
  return id;
}

uint32_t ScheduleBuilder::recvForward(int peer, int next, Region dst, const Region* local, size_t bytes,
                                      size_t elementSize, bool keepDestination, bool streaming) {
  Step step{.kind = local != nullptr ? StepKind::RecvReduce : StepKind::Recv, .peer = peer, .dst = dst,
            .bytes = bytes, .elements = bytes / elementSize, .streaming = streaming};
  if (local != nullptr) step.src = *local;
  step.forwardPeer = next;
  step.keepDestination = keepDestination;
  uint32_t id = add(step);
  if (local != nullptr) read(id, *local, bytes);
  write(id, dst, bytes);  // and read from it by the send: the step ends when both are done
  peerOrder(recvOrder_, peer).push_back(id);
  ++forwards_;
  return id;
}

void ScheduleBuilder::forwardSend(uint32_t step) {
  peerOrder(sendOrder_, steps_[step].forwardPeer).push_back(step);
}

void ScheduleBuilder::sendOn(uint32_t forwarding, int peer, Region src, size_t bytes) {
  if (forwarding != kNoStep) {
    forwardSend(forwarding);
  } else {
    send(peer, src, bytes);
  }
}

uint32_t ScheduleBuilder::reduce(Region dst, Region a, Region b, size_t elements, size_t elementSize) {
  uint32_t id = add({.kind = StepKind::Reduce, .dst = dst, .src = a, .src2 = b, .elements = elements});
  size_t bytes = elements * elementSize;
  read(id, a, bytes);
  read(id, b, bytes);
  write(id, dst, bytes);
  return id;
}

uint32_t ScheduleBuilder::copy(Region dst, Region src, size_t bytes, bool streaming) {
  uint32_t id = add({.kind = StepKind::Copy, .dst = dst, .src = src, .bytes = bytes, .streaming = streaming});
  read(id, src, bytes);
  write(id, dst, bytes);
  return id;
}

uint32_t ScheduleBuilder::divide(Region dst, size_t elements, size_t elementSize) {
  uint32_t id = add({.kind = StepKind::Divide, .dst = dst, .src = dst, .elements = elements});
  read(id, dst, elements * elementSize);
  write(id, dst, elements * elementSize);
  return id;
}

Schedule ScheduleBuilder::finish(const char* algorithm, size_t scratchBytes) {
  Schedule out;
  out.algorithm = algorithm;
  out.scratchBytes = scratchBytes;
  std::vector<std::vector<uint32_t>> successors(steps_.size());
  for (uint32_t s = 0; s < steps_.size(); ++s) {
    steps_[s].dependencyCount = static_cast<uint32_t>(dependencies_[s].size());
    for (uint32_t d : dependencies_[s]) successors[d].push_back(s);
  }
  for (uint32_t s = 0; s < steps_.size(); ++s) {
    steps_[s].firstSuccessor = static_cast<uint32_t>(out.successors.size());
    steps_[s].successorCount = static_cast<uint32_t>(successors[s].size());
    out.successors.insert(out.successors.end(), successors[s].begin(), successors[s].end());
  }
  auto slotOf = [&](int peer) { return static_cast<int>(std::find(peers_.begin(), peers_.end(), peer) - peers_.begin()); };
  for (Step& step : steps_) {
    if (step.peer >= 0) step.peerSlot = slotOf(step.peer);
    if (step.forwardPeer >= 0) step.forwardSlot = slotOf(step.forwardPeer);
  }
  out.steps = std::move(steps_);
  out.peers = std::move(peers_);
  out.sendOrder = std::move(sendOrder_);
  out.recvOrder = std::move(recvOrder_);
  out.forwards = forwards_;
  return out;
}

}  // namespace weft::coll
