// Builds a Schedule from steps in program order, deriving dependencies from the regions each
// step reads and writes (read-after-write, write-after-read, write-after-write), so algorithm
// builders only say what moves where.
#pragma once

#include <map>

#include "coll/schedule.h"

namespace weft::coll {

class ScheduleBuilder {
 public:
  // In place, Send and Recv name the same memory; hazards are tracked accordingly.
  explicit ScheduleBuilder(bool inPlace) : inPlace_(inPlace) {}

  uint32_t send(int peer, Region src, size_t bytes);
  // streaming: dst is a large call's final output, which nothing reads again soon.
  uint32_t recv(int peer, Region dst, size_t bytes, bool streaming = false);
  uint32_t recvReduce(int peer, Region dst, Region local, size_t elements, size_t elementSize);
  // A receive (with `local`, a reduce on receipt: dst = local op incoming) whose result also
  // goes on to `next`: in `peer`'s receive order here, and in `next`'s send order where
  // forwardSend() puts it. keepDestination: whether dst must hold the result (else it is only
  // the send's source, and a transport that sends it straight on need not write it there).
  uint32_t recvForward(int peer, int next, Region dst, const Region* local, size_t bytes, size_t elementSize,
                       bool keepDestination, bool streaming = false);
  void forwardSend(uint32_t step);
  // A ring's send of what it received: the send half of `forwarding` where that names a
  // recvForward step, else a plain send of `bytes` at src.
  static constexpr uint32_t kNoStep = UINT32_MAX;
  void sendOn(uint32_t forwarding, int peer, Region src, size_t bytes);
  uint32_t reduce(Region dst, Region a, Region b, size_t elements, size_t elementSize);
  uint32_t copy(Region dst, Region src, size_t bytes, bool streaming = false);
  uint32_t divide(Region dst, size_t elements, size_t elementSize);

  Schedule finish(const char* algorithm, size_t scratchBytes);

 private:
  struct Access {
    int64_t lastWriter = -1;
    std::vector<uint32_t> readersSinceWrite;
  };
  using RegionMap = std::map<std::pair<size_t, size_t>, Access>;  // by [begin, end)

  uint32_t add(Step step);
  void read(uint32_t step, Region region, size_t bytes);
  void write(uint32_t step, Region region, size_t bytes);
  RegionMap& regionsOf(BufferId buffer);
  template <typename Fn>
  void forOverlapping(RegionMap& map, size_t begin, size_t end, Fn&& fn);
  void dependOn(uint32_t step, int64_t on);
  std::vector<uint32_t>& peerOrder(std::vector<std::vector<uint32_t>>& orders, int peer);

  bool inPlace_;
  std::vector<Step> steps_;
  std::vector<std::vector<uint32_t>> dependencies_;  // per step: steps it waits for
  RegionMap regions_[3];
  size_t maxRegionBytes_[3] = {0, 0, 0};
  std::vector<int> peers_;
  std::vector<std::vector<uint32_t>> sendOrder_;
  std::vector<std::vector<uint32_t>> recvOrder_;
  size_t forwards_ = 0;
};

}  // namespace weft::coll
