#include "transport/socket/socket_connection.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "transport/process_liveness.h"
#include "transport/socket/tcp_peer_end.h"

namespace weft::transport {

SocketConnection::SocketConnection(int peerRank, std::string peerName, std::vector<UniqueFd> streams, pid_t peerPid)
    : peerRank_(peerRank), peerName_(std::move(peerName)), streams_(std::move(streams)), peerPid_(peerPid) {
  sends_.parts.resize(streams_.size());
  recvs_.parts.resize(streams_.size());
}

Status SocketConnection::postSend(const void* data, size_t bytes, MessageTag tag, RequestId* id) {
  // The payload is only read, never written, on the send side.
  return post(sends_, const_cast<char*>(static_cast<const char*>(data)), bytes, tag, true, id);
}

Status SocketConnection::postRecv(void* data, size_t bytes, MessageTag tag, RequestId* id) {
  return post(recvs_, static_cast<char*>(data), bytes, tag, false, id);
}

Status SocketConnection::post(Direction& dir, char* data, size_t bytes, MessageTag tag, bool isSend, RequestId* id) {
  size_t parts = std::clamp<size_t>(bytes / kStripeMinBytes, 1, streams_.size());
  RequestId requestId = dir.first + dir.messages.size();
  dir.messages.push_back({parts, parts, bytes, tag});
  // Messages take turns at the first stream (the n-th send and the n-th receive pick alike), so
  // small messages spread over the streams, and over the rails when streams are on several NICs.
  const size_t first = requestId % streams_.size();
  for (size_t i = 0; i < parts; ++i) {
    size_t begin = bytes * i / parts;
    size_t end = bytes * (i + 1) / parts;
    Part part{requestId, data + begin, end - begin};
    if (isSend) part.header = {kMagic, static_cast<uint32_t>(parts), bytes, tag, 0};
    dir.parts[(first + i) % streams_.size()].push_back(part);
  }
  *id = requestId;
  return Status::ok();
}

void SocketConnection::finishPart(Direction& dir, const Part& part) {
  dir.messages[part.message - dir.first].partsLeft--;
  while (!dir.messages.empty() && dir.messages.front().partsLeft == 0) {
    dir.messages.pop_front();
    dir.first++;
    dir.completed++;
  }
}

Status SocketConnection::peerError(const char* what, int err) const {
  std::string cause = err == 0 ? "connection closed" : errnoString(err);
  return Status(weftRemoteError, formatString("%s rank %d (%s): %s", what, peerRank_, peerName_.c_str(),
                                              cause.c_str()));
}

Status SocketConnection::progressSend(size_t stream, bool* progressed) {
  auto& queue = sends_.parts[stream];
  int fd = streams_[stream].get();
  while (!queue.empty()) {
    Part& part = queue.front();
    iovec iov[2];
    int iovcnt = 0;
    constexpr size_t kHeader = sizeof(WireHeader);
    if (part.done < kHeader) {
      iov[iovcnt++] = {reinterpret_cast<char*>(&part.header) + part.done, kHeader - part.done};
    }
    size_t payloadDone = part.done > kHeader ? part.done - kHeader : 0;
    if (part.bytes > payloadDone) iov[iovcnt++] = {part.data + payloadDone, part.bytes - payloadDone};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = iovcnt;
    ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return Status::ok();
      return peerError("lost the connection to", errno);
    }
    *progressed = true;
    part.done += static_cast<size_t>(n);
    if (part.done < kHeader + part.bytes) return Status::ok();  // socket buffer full
    Part finished = part;
    queue.pop_front();
    finishPart(sends_, finished);
  }
  return Status::ok();
}

Status SocketConnection::progressRecv(size_t stream, bool* progressed) {
  auto& queue = recvs_.parts[stream];
  int fd = streams_[stream].get();
  constexpr size_t kHeader = sizeof(WireHeader);
  while (!queue.empty()) {
    Part& part = queue.front();
    iovec iov[2];
    int iovcnt = 0;
    if (part.done < kHeader) {
      iov[iovcnt++] = {reinterpret_cast<char*>(&part.header) + part.done, kHeader - part.done};
    }
    size_t payloadDone = part.done > kHeader ? part.done - kHeader : 0;
    if (part.bytes > payloadDone) iov[iovcnt++] = {part.data + payloadDone, part.bytes - payloadDone};
    ssize_t n = ::readv(fd, iov, iovcnt);
    if (n == 0) return peerError("lost the connection to", 0);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return Status::ok();
      return peerError("lost the connection to", errno);
    }
    *progressed = true;
    bool headerWasPartial = part.done < kHeader;
    part.done += static_cast<size_t>(n);
    if (headerWasPartial && part.done >= kHeader) {
      const Message& expected = recvs_.messages[part.message - recvs_.first];
      const WireHeader& h = part.header;
      if (h.magic != kMagic) {
        return Status(weftRemoteError, formatString("rank %d (%s) sent a corrupt message header",
                                                    peerRank_, peerName_.c_str()));
      }
      // The tag first: a message of another call has its own size, which is no mismatch of this one's.
      if (h.tag != expected.tag) {
        return tagMismatch(peerRank_, peerName_, expected.tag, h.tag, expected.totalBytes, h.totalBytes);
      }
      if (h.totalBytes != expected.totalBytes || h.parts != expected.parts) {
        return Status(weftInvalidUsage,
                      formatString("message size mismatch with rank %d (%s): expected %zu bytes, the peer "
                                   "sent %llu (do all ranks call the same collectives with the same counts?)",
                                   peerRank_, peerName_.c_str(),
                                   static_cast<size_t>(expected.totalBytes),
                                   static_cast<unsigned long long>(h.totalBytes)));
      }
    }
    if (part.done < kHeader + part.bytes) return Status::ok();
    Part finished = part;
    queue.pop_front();
    finishPart(recvs_, finished);
  }
  return Status::ok();
}

Status SocketConnection::progress(bool* progressed) {
  bool moved = false;
  for (size_t s = 0; s < streams_.size(); ++s) {
    if (!sends_.parts[s].empty()) WEFT_TRY(progressSend(s, &moved));
    if (!recvs_.parts[s].empty()) WEFT_TRY(progressRecv(s, &moved));
  }
  if (moved) {
    *progressed = true;
    movedSinceLook_ = true;
  } else if (peerExited_ && pending()) {
    return Status(weftRemoteError,
                  formatString("lost the connection to rank %d (%s, pid %d): it exited, though its sockets are still "
                               "open (a process it forked may hold them; its end: %s)",
                               peerRank_, peerName_.c_str(), static_cast<int>(peerPid_), peerEnds_.c_str()));
  }
  return Status::ok();
}

bool SocketConnection::prepareToSleep() {
  if (peerPid_ <= 0 || !pending()) return true;
  if (peerExited_) return false;  // progress() says so
  const auto now = std::chrono::steady_clock::now();
  if (now < nextProcessLook_) return true;
  nextProcessLook_ = now + kProcessLookInterval;
  const bool moved = std::exchange(movedSinceLook_, false);
  if (!processGone(peerPid_) || peerEndsStillDelivering()) {
    sawGone_ = false;
    return true;
  }
  // Its ends are held open by some other process (or cannot be seen from here), with nothing
  // of theirs left unacknowledged: what it sent before it went may still be landing, so it counts
  // as exited once a whole look has passed with nothing moving.
  if (sawGone_ && !moved) {
    peerExited_ = true;
    return false;
  }
  sawGone_ = true;
  return true;
}

bool SocketConnection::peerEndsStillDelivering() {
  peerEnds_.clear();
  bool delivering = false;
  for (size_t s = 0; s < streams_.size(); ++s) {
    auto end = findTcpPeerEnd(streams_[s].get());
    if (!end) {
      peerEnds_ += peerEnds_.empty() ? "not listed here" : "; not listed here";
      continue;
    }
    peerEnds_ += (peerEnds_.empty() ? "" : "; ") + end->describe();
    // Closed by its process, the end is the kernel's: it delivers what was queued, then the end
    // of the stream (or a reset), which progress() reports. Held open, it may still be sending
    // what this side waits for.
    delivering |= end->orphaned || (end->unackedBytes > 0 && !recvs_.parts[s].empty());
  }
  return delivering;
}

void SocketConnection::addPollFds(std::vector<pollfd>* fds) const {
  for (size_t s = 0; s < streams_.size(); ++s) {
    short events = 0;
    if (!sends_.parts[s].empty()) events |= POLLOUT;
    if (!recvs_.parts[s].empty()) events |= POLLIN;
    if (events != 0) fds->push_back({streams_[s].get(), events, 0});
  }
}

}  // namespace weft::transport
