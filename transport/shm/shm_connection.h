// A Connection to a peer on the same host through two shared-memory rings (one per direction,
// each created by its sender) plus the TCP socket the pair was set up over, which stays open as
// the control channel: its doorbell bytes wake a side sleeping in poll(), and its EOF tells that
// the peer is gone. Made by establishShm() (shm_setup.h).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <deque>
#include <string>

#include "transport/shm/shm_ring.h"
#include "transport/shm/shm_segment.h"
#include "transport/socket/socket_util.h"
#include "transport/transport.h"

namespace weft::transport {

struct ShmConnectionParams {
  int peerRank = -1;
  std::string peerName;
  pid_t peerPid = 0;
  UniqueFd control;
  ShmSegment outbound;  // created here, written by this side
  ShmSegment inbound;   // created by the peer, read by this side
  shm::RingView out;
  shm::RingView in;
  size_t remoteReadMinBytes = SIZE_MAX;  // messages this large go by process_vm_readv (SIZE_MAX: never)
  bool forward = true;                   // receives may pass on straight into another's slots
  shm::SlotStoresPolicy slotStores = shm::SlotStoresPolicy::Adaptive;
};

class ShmConnection final : public Connection {
 public:
  explicit ShmConnection(ShmConnectionParams params);

  Status postSend(const void* data, size_t bytes, MessageTag tag, RequestId* id) override;
  Status postRecv(void* data, size_t bytes, MessageTag tag, RequestId* id) override;
  Status postRecvStreaming(void* data, size_t bytes, MessageTag tag, RequestId* id) override;
  bool supportsRecvReduce() const override { return true; }
  Status postRecvReduce(void* dst, const void* local, size_t bytes, const ReduceSpec& spec, MessageTag tag,
                        RequestId* id) override;
  bool canForwardTo(const Connection& to) const override;
  Status postForwardedSend(const void* data, size_t bytes, MessageTag tag, Forward* forward, RequestId* id) override;
  Status postForwardedRecv(const ForwardedRecv& recv, MessageTag tag, RequestId* id) override;
  Status progress(bool* progressed) override;
  RequestId completedSends() const override { return sendsCompleted_; }
  RequestId completedRecvs() const override { return recvsCompleted_; }
  bool prepareToSleep() override;
  void addPollFds(std::vector<pollfd>* fds) const override;
  Status checkPeerAlive() override;
  void withdrawSends() override;
  int peerRank() const override { return p_.peerRank; }
  const char* kind() const override { return "shm"; }

 private:
  struct PendingSend {
    const char* data;
    size_t bytes;
    MessageTag tag;
    size_t published = 0;     // bytes handed to the ring
    bool started = false;     // at least one slot written (zero-byte messages take one)
    bool remote = false;      // goes by process_vm_readv
    uint64_t doneAtTail = 0;  // remote: complete once the receiver released this slot
    Forward* forward = nullptr;  // set: publishes only what the forwarding receive has landed
  };
  struct PendingRecv {
    char* data;
    size_t bytes;
    MessageTag tag;
    size_t received = 0;
    bool started = false;
    const char* local = nullptr;  // set: data = local op incoming (postRecvReduce)
    bool streaming = false;       // postRecvStreaming
    ReduceSpec spec{};
    ShmConnection* forwardTo = nullptr;  // set: a forwarding receive (postForwardedRecv)
    Forward* forward = nullptr;
    bool keepDestination = true;
  };

  Status queueRecv(const PendingRecv& recv, RequestId* id);
  Status progressSends(bool* progressed);
  Status progressRecvs(bool* progressed);
  Status consumeSlot(PendingRecv& recv, uint64_t index);
  bool landStraightIntoSend(PendingRecv& recv, const char* payload, size_t bytes);
  PendingSend* firstUnpublished();
  PendingSend* forwardTarget(const Forward* forward, size_t bytes);
  double writeSlot(char* slot, const char* src, size_t bytes, shm::SlotWrite how);
  void countWrite(shm::SlotWrite how, size_t bytes, double nanoseconds);
  void publishSlot(PendingSend& s, shm::SlotKind kind, size_t piece, shm::SlotWrite how);
  void timeSlotRead(shm::SlotStores stores, bool explores, const char* payload, size_t bytes);
  Status checkNotWithdrawn() const;
  Status drainControl();
  void ringDoorbell(std::atomic<uint32_t>& sleeping);
  Status peerGone() const;
  bool peerProcessGone();  // at most every 100 ms; sets peerClosed_

  ShmConnectionParams p_;
  std::deque<PendingSend> sends_;
  std::deque<PendingRecv> recvs_;
  RequestId sendsPosted_ = 0, sendsCompleted_ = 0;
  RequestId recvsPosted_ = 0, recvsCompleted_ = 0;
  uint64_t outHead_ = 0;  // our copy of out.head (we are its only writer)
  uint64_t inTail_ = 0;   // our copy of in.tail (we are its only writer)
  std::vector<char> bounce_;  // a remote-read message that must be reduced, not just landed
  std::vector<char> stripe_;  // a forwarded piece's stripe, reduced here before it goes into a slot
  shm::SlotStoresChooser storesChooser_;  // how our outbound pieces are written
  shm::SlotStoreCosts writeCosts_;        // what writing them costs
  shm::SlotStoreCosts readCosts_;         // what reading inbound pieces costs
  bool checkControl_ = false;
  bool peerClosed_ = false;
  // The control socket's EOF is not enough: a child the peer forked (a DataLoader worker) holds
  // its end open after the peer died. While waiting, the peer's process is looked at too.
  std::chrono::steady_clock::time_point nextProcessLook_{};
};

}  // namespace weft::transport
