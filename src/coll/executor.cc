#include "coll/executor.h"

#include <poll.h>
#include <sched.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "kernels/cpu/copy_streaming.h"
#include "kernels/cpu/reduce.h"

namespace weft::coll {
namespace {

// Waiting spins (yielding the core after the first few rounds) for up to context.spinTime
// without progress before it sleeps in poll(). Waking a sleeping process costs hundreds of
// microseconds on some virtual machines, and a short spin makes both sides of an exchange sleep
// in turn, so with a core per rank the spin must outlast a typical peer delay by a wide margin.
constexpr int kBusyRounds = 16;  // idle rounds before spinning starts to yield the core
constexpr uint32_t kChecksEvery = 64;  // rounds with progress between abort/deadline checks
constexpr int kMaxSleepMs = 50;  // so abort and the deadline are seen promptly
// How long a peer may sit in a later call, with nothing of this one arriving, before the ranks'
// calls count as different (its data would have reached our ring before it went on).
constexpr auto kLaterCallGrace = std::chrono::milliseconds(100);

// A first-in first-out queue on one vector: unlike std::deque, an empty one allocates nothing,
// and a collective builds several per call on its latency path. Every element ever pushed
// stays until the queue is destroyed, which a run's bounded step count allows.
template <typename T>
class StepQueue {
 public:
  bool empty() const { return head_ == items_.size(); }
  const T& front() const { return items_[head_]; }
  void pop_front() { ++head_; }
  template <typename... Args>
  void emplace_back(Args&&... args) { items_.emplace_back(std::forward<Args>(args)...); }

 private:
  std::vector<T> items_;
  size_t head_ = 0;
};

struct PeerState {
  transport::Connection* connection = nullptr;
  size_t sendCursor = 0;  // next index into the schedule's send order to post
  size_t recvCursor = 0;
  StepQueue<std::pair<transport::RequestId, uint32_t>> postedSends;  // (request, step)
  StepQueue<std::pair<transport::RequestId, uint32_t>> postedRecvs;
};

class Run {
 public:
  Run(const Schedule& schedule, std::span<const OperationData> operations, void* scratch,
      const ExecutionContext& context)
      : s_(schedule), ctx_(context), remaining_(schedule.steps.size()), ready_(schedule.steps.size(), 0),
        peers_(schedule.peers.size()) {
    base_.resize(1 + 2 * operations.size());
    base_[Buffer::Scratch] = static_cast<char*>(scratch);
    for (size_t i = 0; i < operations.size(); ++i) {
      const OperationData& op = operations[i];
      base_[Buffer::send(i)] = static_cast<char*>(const_cast<void*>(op.send));
      base_[Buffer::recv(i)] = static_cast<char*>(op.recv);
      reduce_.push_back({op.type, op.op == weftAvg ? weftSum : op.op, kernels::dataTypeSize(op.type)});
      tags_.push_back(op.tag);
    }
    if (schedule.forwards > 0) {  // by step: a forwarding step ends once its receive and its send have
      forwards_.resize(schedule.steps.size());
      halvesLeft_.resize(schedule.steps.size(), 1);
      for (size_t i = 0; i < schedule.steps.size(); ++i) {
        if (schedule.steps[i].forwardPeer >= 0) halvesLeft_[i] = 2;
      }
    }
  }

  // After a failure: the caller returns, and may reuse its buffers, with sends still posted.
  void withdrawSends() {
    for (PeerState& peer : peers_) {
      if (peer.connection != nullptr && !peer.postedSends.empty()) peer.connection->withdrawSends();
    }
  }

  Status execute() {
    for (size_t p = 0; p < peers_.size(); ++p) {
      auto conn = ctx_.connections->connection(s_.peers[p], ctx_.deadline);
      if (!conn.isOk()) return conn.status();
      peers_[p].connection = conn.value();
    }
    for (uint32_t i = 0; i < s_.steps.size(); ++i) {
      remaining_[i] = s_.steps[i].dependencyCount;
      if (remaining_[i] == 0) WEFT_TRY(markReady(i));
    }
    int idleRounds = 0;
    uint32_t busyRounds = 0;
    std::chrono::steady_clock::time_point idleSince;
    while (completed_ < s_.steps.size()) {
      bool progressed = false;
      // One reduction or copy per round, then the transports: local work overlaps the wire.
      if (!computeQueue_.empty()) {
        uint32_t step = computeQueue_.front();
        computeQueue_.pop_front();
        compute(s_.steps[step]);
        WEFT_TRY(complete(step));
        progressed = true;
      }
      for (size_t p = 0; p < peers_.size(); ++p) WEFT_TRY(progressPeer(p, &progressed));
      if (progressed || completed_ == s_.steps.size()) {
        idleRounds = 0;
        peerAheadSince_.reset();
        // Still bounded while data trickles in: abort and the deadline end a call that keeps
        // moving too (every few rounds: a clock read is not free on the latency path).
        if ((++busyRounds & (kChecksEvery - 1)) == 0) WEFT_TRY(checkStillAllowed());
        continue;
      }
      WEFT_TRY(checkStillAllowed());
      if (++idleRounds <= kBusyRounds) continue;
      auto now = std::chrono::steady_clock::now();
      if (idleRounds == kBusyRounds + 1) idleSince = now;
      if (now - idleSince < ctx_.spinTime) {
        sched_yield();
        continue;
      }
      WEFT_TRY(checkNoPeerAhead(now));
      WEFT_TRY(sleepUntilReady());
    }
    return Status::ok();
  }

 private:
  char* address(const Region& region) const { return base_[region.buffer] + region.offset; }

  void compute(const Step& step) {
    const transport::ReduceSpec& spec = reduce_[step.operation];
    switch (step.kind) {
      case StepKind::Reduce:
        kernels::reduce(address(step.dst), address(step.src), address(step.src2), step.elements, spec.type, spec.op);
        break;
      case StepKind::Copy:
        if (step.streaming) {
          kernels::copyStreaming(address(step.dst), address(step.src), step.bytes);
        } else {
          std::memcpy(address(step.dst), address(step.src), step.bytes);
        }
        break;
      case StepKind::Divide:
        kernels::divide(address(step.dst), address(step.dst), step.elements, spec.type,
                        static_cast<uint64_t>(ctx_.nranks));
        break;
      default:
        break;
    }
  }

  Status markReady(uint32_t step) {
    const Step& st = s_.steps[step];
    if (st.kind == StepKind::Send || st.kind == StepKind::Recv || st.kind == StepKind::RecvReduce) {
      ready_[step] = 1;
      if (st.forwardSlot >= 0) WEFT_TRY(postInOrder(static_cast<size_t>(st.forwardSlot)));
      return postInOrder(static_cast<size_t>(st.peerSlot));
    }
    computeQueue_.emplace_back(step);
    return Status::ok();
  }

  // A transfer finished: its step, unless it forwards and the other half is still going.
  Status finishTransfer(uint32_t step) {
    if (!halvesLeft_.empty() && --halvesLeft_[step] > 0) return Status::ok();
    return complete(step);
  }

  Status complete(uint32_t step) {
    ++completed_;
    const Step& st = s_.steps[step];
    for (uint32_t i = 0; i < st.successorCount; ++i) {
      uint32_t next = s_.successors[st.firstSuccessor + i];
      if (--remaining_[next] == 0) WEFT_TRY(markReady(next));
    }
    return Status::ok();
  }

  // Posts this peer's ready sends and receives, never out of the schedule's order.
  Status postInOrder(size_t p) {
    PeerState& peer = peers_[p];
    const auto& sends = s_.sendOrder[p];
    while (peer.sendCursor < sends.size() && ready_[sends[peer.sendCursor]]) {
      uint32_t step = sends[peer.sendCursor++];
      transport::RequestId id;
      const Step& st = s_.steps[step];
      if (st.forwardPeer >= 0) {  // a forwarding receive's send half: it sends what lands in dst
        WEFT_TRY(peer.connection->postForwardedSend(address(st.dst), st.bytes, tags_[st.operation], &forwards_[step],
                                                    &id));
      } else {
        WEFT_TRY(peer.connection->postSend(address(st.src), st.bytes, tags_[st.operation], &id));
      }
      peer.postedSends.emplace_back(id, step);
    }
    const auto& recvs = s_.recvOrder[p];
    while (peer.recvCursor < recvs.size() && ready_[recvs[peer.recvCursor]]) {
      uint32_t step = recvs[peer.recvCursor++];
      const Step& st = s_.steps[step];
      transport::RequestId id;
      if (st.forwardPeer >= 0) {
        transport::Connection::ForwardedRecv recv{
            .dst = address(st.dst),
            .local = st.kind == StepKind::RecvReduce ? address(st.src) : nullptr,
            .bytes = st.bytes,
            .spec = reduce_[st.operation],
            .keepDestination = st.keepDestination,
            .streaming = st.streaming,
            .to = peers_[static_cast<size_t>(st.forwardSlot)].connection,
            .forward = &forwards_[step]};
        WEFT_TRY(peer.connection->postForwardedRecv(recv, tags_[st.operation], &id));
      } else if (st.kind == StepKind::RecvReduce) {
        WEFT_TRY(peer.connection->postRecvReduce(address(st.dst), address(st.src), st.bytes, reduce_[st.operation],
                                                 tags_[st.operation], &id));
      } else if (st.streaming) {
        WEFT_TRY(peer.connection->postRecvStreaming(address(st.dst), st.bytes, tags_[st.operation], &id));
      } else {
        WEFT_TRY(peer.connection->postRecv(address(st.dst), st.bytes, tags_[st.operation], &id));
      }
      peer.postedRecvs.emplace_back(id, step);
    }
    return Status::ok();
  }

  Status progressPeer(size_t p, bool* progressed) {
    PeerState& peer = peers_[p];
    if (peer.postedSends.empty() && peer.postedRecvs.empty()) return Status::ok();
    Status moved = peer.connection->progress(progressed);
    if (!moved.isOk()) return moved.withContext(ctx_.collective);
    // Completions may post more work for this peer; drain until nothing new completes.
    while (!peer.postedSends.empty() && peer.postedSends.front().first < peer.connection->completedSends()) {
      uint32_t step = peer.postedSends.front().second;
      peer.postedSends.pop_front();
      WEFT_TRY(finishTransfer(step));
    }
    while (!peer.postedRecvs.empty() && peer.postedRecvs.front().first < peer.connection->completedRecvs()) {
      uint32_t step = peer.postedRecvs.front().second;
      peer.postedRecvs.pop_front();
      WEFT_TRY(finishTransfer(step));
    }
    return Status::ok();
  }

  // Past the deadline: weftTimeout, naming the peer still owing data (or not taking ours), as
  // the arena's waits and init's do. A peer seen gone is weftRemoteError, before any deadline.
  Status checkStillAllowed() const {
    if (ctx_.abortFlag != nullptr && ctx_.abortFlag->load(std::memory_order_relaxed)) {
      return Status(weftRemoteError, std::string(ctx_.collective) + ": the communicator was aborted");
    }
    if (!ctx_.deadline.expired()) return Status::ok();
    for (size_t p = 0; p < peers_.size(); ++p) {
      if (!peers_[p].postedRecvs.empty()) {
        return Status(weftTimeout, formatString("%s: timed out after %d ms waiting for data from %s",
                                                ctx_.collective, ctx_.timeoutMs,
                                                ctx_.connections->describe(s_.peers[p]).c_str()));
      }
    }
    for (size_t p = 0; p < peers_.size(); ++p) {
      if (!peers_[p].postedSends.empty()) {
        return Status(weftTimeout, formatString("%s: timed out after %d ms waiting for %s to take data",
                                                ctx_.collective, ctx_.timeoutMs,
                                                ctx_.connections->describe(s_.peers[p]).c_str()));
      }
    }
    return Status(weftTimeout, formatString("%s: timed out after %d ms", ctx_.collective, ctx_.timeoutMs));
  }

  // A peer that still owes this call data, or has yet to take ours, but has begun a later call
  // (through the arena) never will: the ranks make different calls. That is an error now, not a
  // timeout later.
  Status checkNoPeerAhead(std::chrono::steady_clock::time_point now) {
    if (!ctx_.peerInLaterCall) return Status::ok();
    for (size_t p = 0; p < peers_.size(); ++p) {
      const bool owed = !peers_[p].postedRecvs.empty() || !peers_[p].postedSends.empty();
      if (!owed || !ctx_.peerInLaterCall(s_.peers[p])) continue;
      if (!peerAheadSince_) peerAheadSince_ = now;
      if (now - *peerAheadSince_ < kLaterCallGrace) return Status::ok();
      return Status(weftInvalidUsage,
                    formatString("%s: %s has gone on to a later collective call (a small one, through shared "
                                 "memory) while this rank still exchanges data with it in this one: every rank "
                                 "must make the same collective calls in the same order",
                                 ctx_.collective, ctx_.connections->describe(s_.peers[p]).c_str()));
    }
    return Status::ok();
  }

  Status sleepUntilReady() {
    for (PeerState& peer : peers_) {
      if (!peer.connection->prepareToSleep()) return Status::ok();  // work arrived meanwhile
    }
    pollFds_.clear();
    for (const PeerState& peer : peers_) peer.connection->addPollFds(&pollFds_);
    int waitMs = ctx_.deadline.remainingMs(kMaxSleepMs);
    if (pollFds_.empty()) {
      sched_yield();
      return Status::ok();
    }
    if (::poll(pollFds_.data(), pollFds_.size(), waitMs) < 0 && errno != EINTR) {
      return Status(weftSystemError, "poll: " + errnoString(errno));
    }
    return Status::ok();
  }

  const Schedule& s_;
  const ExecutionContext& ctx_;
  std::vector<char*> base_;                   // by BufferId
  std::vector<transport::ReduceSpec> reduce_;  // by operation
  std::vector<transport::MessageTag> tags_;    // by operation
  std::vector<uint32_t> remaining_;
  std::vector<uint8_t> ready_;
  std::vector<PeerState> peers_;
  std::optional<std::chrono::steady_clock::time_point> peerAheadSince_;  // idle, with a peer ahead
  std::vector<transport::Forward> forwards_;  // by step, where the schedule forwards
  std::vector<uint8_t> halvesLeft_;           // by step, likewise: transfers a step still waits for
  StepQueue<uint32_t> computeQueue_;  // ready reductions and copies, oldest first
  std::vector<pollfd> pollFds_;
  size_t completed_ = 0;
};

}  // namespace

Status executeSchedule(const Schedule& schedule, std::span<const OperationData> operations, void* scratch,
                       const ExecutionContext& context) {
  if (schedule.steps.empty()) return Status::ok();
  Run run(schedule, operations, scratch, context);
  Status status = run.execute();
  if (!status.isOk()) run.withdrawSends();
  return status;
}

}  // namespace weft::coll
