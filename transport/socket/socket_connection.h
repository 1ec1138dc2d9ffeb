// A Connection over one or more TCP streams to a peer. Each message travels with a header
// (magic, parts, length, tag) so that a mismatch fails the call. The header and payload are read
// in one readv (a syscall fewer per message), so bytes of a mismatched message may land in the
// receiver's buffer before the header is checked, never past its end; the call then fails, and
// a failed call's output is undefined, as in NCCL. Large messages are striped over the streams
// in contiguous parts.
//
// A peer on this host whose pid this process can look at (the same pid namespace) is also
// watched as a process while something is pending: killed while a child it forked (a DataLoader
// worker) holds its sockets, it shows no EOF, and would otherwise fail the call only at its
// timeout.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <deque>
#include <vector>

#include "transport/socket/socket_util.h"
#include "transport/transport.h"

namespace weft::transport {

class SocketConnection final : public Connection {
 public:
  // peerPid: the peer's pid where it is on this host, in this process's pid namespace; 0 where
  // its process cannot be watched.
  SocketConnection(int peerRank, std::string peerName, std::vector<UniqueFd> streams, pid_t peerPid = 0);

  Status postSend(const void* data, size_t bytes, MessageTag tag, RequestId* id) override;
  Status postRecv(void* data, size_t bytes, MessageTag tag, RequestId* id) override;
  Status progress(bool* progressed) override;
  RequestId completedSends() const override { return sends_.completed; }
  RequestId completedRecvs() const override { return recvs_.completed; }
  bool prepareToSleep() override;
  void addPollFds(std::vector<pollfd>* fds) const override;
  int peerRank() const override { return peerRank_; }
  const char* kind() const override { return "socket"; }

  // Messages below this size use one stream; above, they are striped.
  static constexpr size_t kStripeMinBytes = 256 * 1024;

 private:
  struct WireHeader {
    uint32_t magic;
    uint32_t parts;        // how many streams carry this message
    uint64_t totalBytes;   // the whole message, so both sides split it the same way
    MessageTag tag;
    uint32_t reserved;
  };
  static constexpr uint32_t kMagic = 0x57465431;  // "WFT1"

  // One message's share on one stream: its header, then its payload range.
  struct Part {
    RequestId message;
    char* data;
    size_t bytes;
    size_t done = 0;  // bytes of header + payload moved
    WireHeader header{};
  };
  struct Message {
    size_t parts;
    size_t partsLeft;
    uint64_t totalBytes;
    MessageTag tag;
  };
  struct Direction {
    std::deque<Message> messages;   // posted, not yet complete
    RequestId first = 0;            // id of messages.front()
    RequestId completed = 0;        // ids below this are complete
    std::vector<std::deque<Part>> parts;  // per stream
  };

  Status post(Direction& dir, char* data, size_t bytes, MessageTag tag, bool isSend, RequestId* id);
  Status progressSend(size_t stream, bool* progressed);
  Status progressRecv(size_t stream, bool* progressed);
  void finishPart(Direction& dir, const Part& part);
  Status peerError(const char* what, int err) const;
  bool pending() const { return !sends_.messages.empty() || !recvs_.messages.empty(); }
  // With the peer's process gone: whether the far end of any stream is closed (the kernel is
  // delivering what it queued, then the stream's end) or has bytes on their way. Describes the
  // ends in peerEnds_ for the error that reports the peer exited.
  bool peerEndsStillDelivering();

  int peerRank_;
  std::string peerName_;
  std::vector<UniqueFd> streams_;
  Direction sends_;
  Direction recvs_;

  // Watching the peer's process (peerPid_ > 0): looks at most every kProcessLookInterval.
  static constexpr std::chrono::milliseconds kProcessLookInterval{100};
  pid_t peerPid_;
  std::chrono::steady_clock::time_point nextProcessLook_{};
  bool movedSinceLook_ = false;  // a byte moved since the last look
  bool sawGone_ = false;         // the last look found the process gone
  bool peerExited_ = false;      // gone, and nothing moved for a whole look after
  std::string peerEnds_;         // the peer's ends of the streams, at the last look
};

}  // namespace weft::transport
