// An algorithm is data: a Schedule is a graph of steps (send, receive, reduce, copy, divide)
// over regions of buffers, with dependencies. Builders make one per (collective, algorithm,
// count, element size, rank layout, in-place) over three buffers (send, receive, scratch);
// a group's schedules merge into one over every operation's buffers (schedule_merge.h). One
// Executor runs any of them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "util/status.h"

namespace weft::coll {

// Buffers are numbered: the shared scratch, then each operation's send and receive buffers.
using BufferId = uint32_t;
struct Buffer {
  static constexpr BufferId Scratch = 0;
  static constexpr BufferId Send = 1;  // operation 0's; operation i's is send(i)
  static constexpr BufferId Recv = 2;
  static constexpr BufferId send(size_t operation) { return static_cast<BufferId>(1 + 2 * operation); }
  static constexpr BufferId recv(size_t operation) { return static_cast<BufferId>(2 + 2 * operation); }
};

struct Region {
  BufferId buffer;
  size_t offset;  // bytes
};

enum class StepKind : uint8_t {
  Send,    // bytes from `src` to `peer`
  Recv,    // bytes from `peer` into `dst`
  RecvReduce,  // `elements` from `peer`, landing as dst = src op incoming (a Recv for ordering)
  // A Recv or RecvReduce with forwardPeer set also sends what it lands, from dst, to
  // forwardPeer: one step in both peers' orders, which over shared memory writes straight into
  // the outbound slot (transport::Forward) instead of into dst and then out of it again.
  Reduce,  // dst = src op src2, `elements` of them; dst may equal src or src2
  Copy,    // bytes from `src` to `dst`
  Divide,  // dst = dst / nranks (Avg's last step), `elements` of them
};

struct Step {
  StepKind kind;
  uint32_t operation = 0;  // which of the execution's operations (data type, reduction) it serves
  int peer = -1;
  int peerSlot = -1;  // index into Schedule::peers, filled by the builder
  Region dst{Buffer::Recv, 0};
  Region src{Buffer::Send, 0};
  Region src2{Buffer::Scratch, 0};
  size_t bytes = 0;     // Send, Recv, Copy
  size_t elements = 0;  // Reduce, Divide
  bool streaming = false;  // Recv, Copy: dst written around the caches (copy_streaming.h)
  int forwardPeer = -1;    // Recv, RecvReduce: also sent on to this peer (see StepKind)
  int forwardSlot = -1;    // its index into Schedule::peers
  bool keepDestination = true;  // forwarding: false when dst is only the send's source
  // Dependencies: this step may start when `dependencyCount` earlier steps have finished;
  // when it finishes it releases the steps listed in successors[firstSuccessor, +successorCount).
  uint32_t dependencyCount = 0;
  uint32_t firstSuccessor = 0;
  uint32_t successorCount = 0;
};

struct Schedule {
  std::vector<Step> steps;
  std::vector<uint32_t> successors;
  size_t scratchBytes = 0;
  // Per peer, its sends and receives in the order they must be posted (the transport matches
  // the n-th send with the n-th receive).
  std::vector<int> peers;
  std::vector<std::vector<uint32_t>> sendOrder;  // parallel to peers
  std::vector<std::vector<uint32_t>> recvOrder;  // parallel to peers
  const char* algorithm = "";
  size_t forwards = 0;  // steps with forwardPeer set
  int channels = 1;  // rings run side by side, each over its share (the ring all-reduce's channels)
};

}  // namespace weft::coll
