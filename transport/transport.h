// The transport interface: one Connection per peer, with non-blocking posted sends and
// receives of byte ranges (NCCL's net-plugin shape). Shared memory and sockets implement it
// (RDMA will); the collective executor knows nothing else about them. CUDA IPC is not a
// Connection: the device all-reduce maps its peers' buffers (transport/cuda_ipc).
//
// Ordering: sends complete in the order they were posted, and so do receives; the n-th send
// posted on one side matches the n-th receive posted on the other, and their sizes must agree
// (a mismatch is an error, never an overrun). Each message also carries a tag naming the call it
// belongs to (MessageTag), which the receiver checks against its post, so ranks that disagree
// about the collective, count, type, operator or root get an error instead of each other's data.
#pragma once

#include <poll.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "util/status.h"
#include "weft/weft.h"

namespace weft::transport {

// Identifies a posted operation; increases by one per post in each direction.
using RequestId = uint64_t;

// What a message belongs to: a digest of the call's signature, equal on every rank of one call.
using MessageTag = uint32_t;

// What a fused receive-and-reduce computes: dst = local op incoming, element by element.
struct ReduceSpec {
  weftDataType_t type;
  weftRedOp_t op;  // Sum, Prod, Max or Min
  size_t elementSize;
};

// Couples a receive with a later send of the same bytes to another peer (or the same one): a
// ring passes on what it receives. The receive may write its bytes straight into the send's
// staging memory, which saves the copy the send would otherwise make out of the receive's
// destination; where the staging is not free yet it lands them in its destination as usual and
// the send publishes them from there. Both posts share one Forward, which the caller keeps
// until both have completed.
struct Forward {
  size_t landed = 0;  // bytes the receive has made available (in the send's staging, or in its destination)
};

// The error for a message whose tag differs from the posted receive's, with both sizes: a
// message of another call says nothing of this call's size on the peer (a send of 0 bytes, say,
// sends nothing and lets the peer's next call answer).
Status tagMismatch(int peerRank, const std::string& peerName, MessageTag expected, MessageTag got,
                   uint64_t expectedBytes, uint64_t gotBytes);

class Connection {
 public:
  virtual ~Connection() = default;

  // The buffer must stay valid and untouched until the request completes.
  virtual Status postSend(const void* data, size_t bytes, MessageTag tag, RequestId* id) = 0;
  virtual Status postRecv(void* data, size_t bytes, MessageTag tag, RequestId* id) = 0;
  // A receive into a large call's final output, which nothing reads again soon: the transport
  // may write it around the caches (copy_streaming.h). A plain receive otherwise.
  virtual Status postRecvStreaming(void* data, size_t bytes, MessageTag tag, RequestId* id) {
    return postRecv(data, bytes, tag, id);
  }

  // A receive that lands as dst = local op incoming, reduced straight out of the transport's
  // staging memory instead of being copied out first. Counts as a receive (same ordering and
  // matching). Only where supportsRecvReduce(); schedules use it only then.
  virtual bool supportsRecvReduce() const { return false; }
  virtual Status postRecvReduce(void* /*dst*/, const void* /*local*/, size_t /*bytes*/, const ReduceSpec& /*spec*/,
                                MessageTag /*tag*/, RequestId* /*id*/) {
    return Status(weftInternalError, std::string(kind()) + " connections cannot reduce on receipt");
  }

  // Forwarding (struct Forward): whether this connection's receives can pass their bytes to
  // `to`'s sends. Schedules use the two posts below only then.
  virtual bool canForwardTo(const Connection& /*to*/) const { return false; }
  // A send of `bytes` from `data` (the destination of the receive that shares `forward`), which
  // publishes only what that receive has landed.
  virtual Status postForwardedSend(const void* /*data*/, size_t /*bytes*/, MessageTag /*tag*/, Forward* /*forward*/,
                                   RequestId* /*id*/) {
    return Status(weftInternalError, std::string(kind()) + " connections cannot forward");
  }
  // A receive (into dst; with `local`, dst = local op incoming) whose bytes `to`'s forwarded
  // send passes on. With keepDestination false, dst need not receive the bytes that went
  // straight into the send's staging (it is only that send's source); streaming: as for
  // postRecvStreaming.
  struct ForwardedRecv {
    void* dst = nullptr;
    const void* local = nullptr;  // null: a plain receive
    size_t bytes = 0;
    ReduceSpec spec{};
    bool keepDestination = true;
    bool streaming = false;
    Connection* to = nullptr;
    Forward* forward = nullptr;
  };
  virtual Status postForwardedRecv(const ForwardedRecv& /*recv*/, MessageTag /*tag*/, RequestId* /*id*/) {
    return Status(weftInternalError, std::string(kind()) + " connections cannot forward");
  }

  // Moves whatever can move without blocking; sets *progressed when any byte moved.
  virtual Status progress(bool* progressed) = 0;

  // Requests complete in posting order, so these are counters: id < completedSends() is done.
  virtual RequestId completedSends() const = 0;
  virtual RequestId completedRecvs() const = 0;

  // Called before the caller sleeps in poll() on addPollFds(): a transport whose peer wakes it
  // through shared memory arms its doorbell here, and returns false when there is already
  // something to do (the caller then does not sleep).
  virtual bool prepareToSleep() { return true; }

  // The caller gives up on its pending sends (its call failed and it may reuse the buffers at
  // once): from here on the peer must not take bytes from them. Only a transport that lets the
  // peer read the caller's buffer in place has anything to do.
  virtual void withdrawSends() {}

  // Descriptors to sleep on when nothing progresses (none: the caller yields instead).
  virtual void addPollFds(std::vector<pollfd>* fds) const = 0;

  // An error when the peer is known to be gone (it closed its end), for waits on the peer that
  // happen outside this connection (see shm_arena.h). Never blocks.
  virtual Status checkPeerAlive() { return Status::ok(); }

  virtual int peerRank() const = 0;
  virtual const char* kind() const = 0;  // "socket", "shm", ...
};

}  // namespace weft::transport
