#include "transport/shm/shm_connection.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstring>

#include "kernels/cpu/copy_streaming.h"
#include "kernels/cpu/reduce.h"
#include "util/log.h"

namespace weft::transport {

using shm::SlotHeader;
using shm::SlotKind;
using shm::SlotStores;

ShmConnection::ShmConnection(ShmConnectionParams params)
    : p_(std::move(params)), storesChooser_(p_.slotStores) {}

Status ShmConnection::postSend(const void* data, size_t bytes, MessageTag tag, RequestId* id) {
  PendingSend send{static_cast<const char*>(data), bytes, tag};
  send.remote = bytes >= p_.remoteReadMinBytes;
  sends_.push_back(send);
  *id = sendsPosted_++;
  return Status::ok();
}

Status ShmConnection::queueRecv(const PendingRecv& recv, RequestId* id) {
  recvs_.push_back(recv);
  *id = recvsPosted_++;
  return Status::ok();
}

Status ShmConnection::postRecv(void* data, size_t bytes, MessageTag tag, RequestId* id) {
  return queueRecv(PendingRecv{static_cast<char*>(data), bytes, tag}, id);
}

Status ShmConnection::postRecvStreaming(void* data, size_t bytes, MessageTag tag, RequestId* id) {
  PendingRecv recv{static_cast<char*>(data), bytes, tag};
  recv.streaming = true;
  return queueRecv(recv, id);
}

Status ShmConnection::postRecvReduce(void* dst, const void* local, size_t bytes, const ReduceSpec& spec,
                                     MessageTag tag, RequestId* id) {
  PendingRecv recv{static_cast<char*>(dst), bytes, tag};
  recv.local = static_cast<const char*>(local);
  recv.spec = spec;
  return queueRecv(recv, id);
}

bool ShmConnection::canForwardTo(const Connection& to) const {
  return p_.forward && dynamic_cast<const ShmConnection*>(&to) != nullptr;
}

Status ShmConnection::postForwardedSend(const void* data, size_t bytes, MessageTag tag, Forward* forward,
                                        RequestId* id) {
  if (bytes == 0) return Status(weftInternalError, "a forwarded send must carry bytes");
  PendingSend send{static_cast<const char*>(data), bytes, tag};
  send.forward = forward;  // never remote: its bytes may not be in `data` at all
  sends_.push_back(send);
  *id = sendsPosted_++;
  return Status::ok();
}

Status ShmConnection::postForwardedRecv(const ForwardedRecv& f, MessageTag tag, RequestId* id) {
  auto* to = dynamic_cast<ShmConnection*>(f.to);
  if (to == nullptr || f.forward == nullptr || f.bytes == 0) {
    return Status(weftInternalError, "shm: a forwarding receive needs an shm connection to forward to, and bytes");
  }
  PendingRecv recv{static_cast<char*>(f.dst), f.bytes, tag};
  recv.local = static_cast<const char*>(f.local);
  recv.spec = f.spec;
  recv.streaming = f.streaming;
  recv.forwardTo = to;
  recv.forward = f.forward;
  recv.keepDestination = f.keepDestination;
  return queueRecv(recv, id);
}

Status ShmConnection::peerGone() const {
  return Status(weftRemoteError, formatString("lost the connection to rank %d (%s, pid %d): it closed its end or exited",
                                              p_.peerRank, p_.peerName.c_str(), static_cast<int>(p_.peerPid)));
}

bool ShmConnection::peerProcessGone() {
  if (peerClosed_) return true;
  const auto now = std::chrono::steady_clock::now();
  if (now < nextProcessLook_) return false;
  nextProcessLook_ = now + std::chrono::milliseconds(100);
  peerClosed_ = ShmSegment::creatorGone(p_.inbound.name());
  return peerClosed_;
}

void ShmConnection::ringDoorbell(std::atomic<uint32_t>& sleeping) {
  // Pairs with the fence in prepareToSleep(): either the sleeper sees our update before it
  // sleeps, or we see its flag here and wake it.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (sleeping.load(std::memory_order_relaxed) != 0 && sleeping.exchange(0) != 0) {
    char bell = 1;
    (void)::send(p_.control.get(), &bell, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
  }
}

Status ShmConnection::drainControl() {
  char bells[64];
  for (;;) {
    ssize_t n = ::recv(p_.control.get(), bells, sizeof(bells), MSG_DONTWAIT);
    if (n > 0) continue;
    if (n == 0 || errno == ECONNRESET || errno == EPIPE) {
      peerClosed_ = true;
      return Status::ok();
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::ok();
    if (errno == EINTR) continue;
    return Status(weftSystemError, formatString("control socket to rank %d: %s", p_.peerRank, errnoString(errno).c_str()));
  }
}

Status ShmConnection::progressSends(bool* progressed) {
  const uint32_t slots = p_.out.slotCount;
  bool published = false;
  for (PendingSend& s : sends_) {
    while (!(s.started && s.published == s.bytes)) {
      if (s.forward != nullptr && s.published == s.forward->landed) goto ringFull;  // its receive is behind
      uint64_t tail = p_.out.control->tail.load(std::memory_order_acquire);
      if (outHead_ - tail >= slots) goto ringFull;
      if (s.remote) {
        publishSlot(s, SlotKind::Remote, s.bytes, shm::SlotWrite{});
        s.doneAtTail = outHead_;
      } else {
        const size_t available = s.forward != nullptr ? s.forward->landed : s.bytes;
        const size_t piece = std::min<size_t>(p_.out.slotBytes, available - s.published);
        const shm::SlotWrite how = storesChooser_.choose(piece);
        countWrite(how, piece, writeSlot(p_.out.payload(outHead_), s.data + s.published, piece, how));
        publishSlot(s, SlotKind::Data, piece, how);
      }
      published = true;
    }
  }
ringFull:
  if (published) {
    *progressed = true;
    ringDoorbell(p_.out.control->receiverSleeping);
  }
  // Sends complete in order: a copied message once it is all in the ring, a remote one once
  // the receiver has released its slot (it has read our buffer by then).
  uint64_t tail = p_.out.control->tail.load(std::memory_order_acquire);
  while (!sends_.empty()) {
    const PendingSend& f = sends_.front();
    if (!(f.started && f.published == f.bytes) || (f.remote && tail < f.doneAtTail)) break;
    sends_.pop_front();
    ++sendsCompleted_;
    *progressed = true;
  }
  return Status::ok();
}

// Reads `bytes` at `remote` in the peer's address space into `local`.
static Status readRemote(pid_t pid, int peerRank, char* local, uint64_t remote, size_t bytes) {
  while (bytes > 0) {
    iovec l{local, bytes};
    iovec r{reinterpret_cast<void*>(remote), bytes};
    ssize_t n = ::process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      weftResult_t code = (n == 0 || errno == ESRCH || errno == EFAULT) ? weftRemoteError : weftSystemError;
      return Status(code, formatString("reading rank %d's buffer (pid %d) with process_vm_readv: %s", peerRank,
                                       static_cast<int>(pid), n == 0 ? "no progress" : errnoString(errno).c_str()));
    }
    local += n;
    remote += static_cast<uint64_t>(n);
    bytes -= static_cast<size_t>(n);
  }
  return Status::ok();
}

void ShmConnection::withdrawSends() {
  const bool exposed =
      std::any_of(sends_.begin(), sends_.end(), [](const PendingSend& s) { return s.remote && s.started; });
  if (!exposed) return;
  // The flag must be visible before any write the caller makes to the buffer after we return.
  p_.out.control->senderWithdrew.store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

// After a remote read: whether the sender withdrew meanwhile (or before), so that what was read
// may hold bytes of the buffer's next use.
Status ShmConnection::checkNotWithdrawn() const {
  std::atomic_thread_fence(std::memory_order_acquire);
  if (p_.in.control->senderWithdrew.load(std::memory_order_relaxed) == 0) return Status::ok();
  return Status(weftRemoteError,
                formatString("rank %d (%s) withdrew a message before it was read here: its call failed (timeout or "
                             "abort) and its buffer is no longer valid",
                             p_.peerRank, p_.peerName.c_str()));
}

Status ShmConnection::consumeSlot(PendingRecv& r, uint64_t index) {
  // Read the header once: the peer could change shared memory under us.
  const SlotHeader h = *p_.in.header(index);
  // The tag first: a message of another call has its own size, which is no mismatch of this one's.
  if (h.tag != r.tag) return tagMismatch(p_.peerRank, p_.peerName, r.tag, h.tag, r.bytes, h.messageBytes);
  if (h.messageBytes != r.bytes) {
    return Status(weftInvalidUsage,
                  formatString("message size mismatch with rank %d (%s): expected %zu bytes, the peer sent %llu (do "
                               "all ranks call the same collectives with the same counts?)",
                               p_.peerRank, p_.peerName.c_str(), r.bytes,
                               static_cast<unsigned long long>(h.messageBytes)));
  }
  const size_t left = r.bytes - r.received;
  const bool whole = r.local == nullptr || h.pieceBytes % r.spec.elementSize == 0;
  if (h.kind == SlotKind::Data && h.pieceBytes <= p_.in.slotBytes && h.pieceBytes <= left && whole) {
    if (h.stores != SlotStores::Unmeasured) {
      timeSlotRead(h.stores, h.explores != 0, p_.in.payload(index), h.pieceBytes);
    }
    if (r.forward != nullptr && landStraightIntoSend(r, p_.in.payload(index), h.pieceBytes)) {
      // done: the piece went on without passing through the destination first
    } else if (r.local == nullptr && r.streaming) {
      kernels::copyStreaming(r.data + r.received, p_.in.payload(index), h.pieceBytes);
    } else if (r.local == nullptr) {
      std::memcpy(r.data + r.received, p_.in.payload(index), h.pieceBytes);
    } else {  // reduce straight out of the slot: no copy out of shared memory first
      kernels::reduce(r.data + r.received, r.local + r.received, p_.in.payload(index),
                      h.pieceBytes / r.spec.elementSize, r.spec.type, r.spec.op);
    }
  } else if (h.kind == SlotKind::Remote && !r.started && h.pieceBytes == r.bytes && whole) {
    if (r.local == nullptr) {
      WEFT_TRY(readRemote(p_.peerPid, p_.peerRank, r.data, h.remoteAddress, r.bytes));
    } else {  // a piece at a time through a bounce buffer of fixed size, which stays in cache
      constexpr size_t kBounceBytes = 256 * 1024;  // a multiple of every element size
      if (bounce_.size() < kBounceBytes) bounce_.resize(kBounceBytes);
      for (size_t done = 0; done < r.bytes; done += kBounceBytes) {
        const size_t piece = std::min(kBounceBytes, r.bytes - done);
        WEFT_TRY(readRemote(p_.peerPid, p_.peerRank, bounce_.data(), h.remoteAddress + done, piece));
        kernels::reduce(r.data + done, r.local + done, bounce_.data(), piece / r.spec.elementSize, r.spec.type,
                        r.spec.op);
      }
    }
    WEFT_TRY(checkNotWithdrawn());
  } else {
    return Status(weftRemoteError, formatString("rank %d (%s) wrote a corrupt shared-memory slot", p_.peerRank,
                                                p_.peerName.c_str()));
  }
  r.received += h.pieceBytes;
  r.started = true;
  if (r.forward != nullptr) r.forward->landed = r.received;
  return Status::ok();
}

// A forwarding receive's piece, reduced (or copied) from our slot straight into the slot of the
// send that passes it on, when that send is next in its ring and the ring has room; false
// leaves the piece to land in the destination, from which the send publishes it.
bool ShmConnection::landStraightIntoSend(PendingRecv& r, const char* payload, size_t bytes) {
  ShmConnection& to = *r.forwardTo;
  PendingSend* send = to.forwardTarget(r.forward, bytes);
  if (send == nullptr) return false;
  char* slot = to.p_.out.payload(to.outHead_);
  const shm::SlotWrite how = to.storesChooser_.choose(bytes);
  char* destination = r.data + r.received;
  // A reduction whose outputs (the slot, and the destination where it is kept) both take
  // streaming stores, untimed, goes in one pass: each input read once, each output written once,
  // where the stripe below is written out twice (2 ranks, 1-256 MiB: 9-26% faster in the median
  // of 9 paired runs, bench/results/2026-12-02-shm-forward-one-pass.md). With plain stores it
  // gained nothing: the reduction goes straight into the slot, and the copy out reads it from L1.
  // reduceMany streams only where the destination is aligned as the slot is (to 64 bytes).
  const bool streamedAlike = how.streaming && (!r.keepDestination || (r.streaming &&
                                                reinterpret_cast<uintptr_t>(destination) % 64 == 0));
  if (r.local != nullptr && !how.timed && streamedAlike) {
    void* outs[] = {slot, destination};
    const void* ins[] = {r.local + r.received, payload};
    kernels::reduceMany({outs, r.keepDestination ? 2 : 1, ins, 2, bytes / r.spec.elementSize, r.spec.type,
                         r.spec.op, how.streaming});
  } else {
    // A few KiB at a time, so that the copy into the destination reads them from L1.
    constexpr size_t kStripe = 8 * 1024;  // a multiple of every element size
    // A reduction goes straight into the slot where plain stores write it untimed; else into a
    // stripe, whose write into the slot (streaming, or timed alone) follows.
    const bool viaStripe = r.local != nullptr && (how.streaming || how.timed);
    if (viaStripe && stripe_.size() < kStripe) stripe_.resize(kStripe);
    double writing = 0;  // nanoseconds spent writing the slot
    for (size_t done = 0; done < bytes; done += kStripe) {
      const size_t n = std::min(kStripe, bytes - done);
      const char* out = payload + done;  // what the slot gets
      if (r.local != nullptr) {
        char* sum = viaStripe ? stripe_.data() : slot + done;
        kernels::reduce(sum, r.local + r.received + done, payload + done, n / r.spec.elementSize, r.spec.type,
                        r.spec.op);
        out = sum;
      }
      if (out != slot + done) writing += to.writeSlot(slot + done, out, n, how);
      if (r.keepDestination && r.streaming) {
        kernels::copyStreaming(destination + done, out, n);
      } else if (r.keepDestination) {
        std::memcpy(destination + done, out, n);
      }
    }
    to.countWrite(how, bytes, writing);
  }
  to.publishSlot(*send, SlotKind::Data, bytes, how);
  to.ringDoorbell(to.p_.out.control->receiverSleeping);
  return true;
}

ShmConnection::PendingSend* ShmConnection::firstUnpublished() {
  for (PendingSend& s : sends_) {
    if (!(s.started && s.published == s.bytes)) return &s;
  }
  return nullptr;
}

// The send sharing `forward`, when `forward`'s receive may write `bytes` of it straight into our
// next outbound slot: it is the first send with bytes to publish, has published all that
// landed before, and a slot is free.
ShmConnection::PendingSend* ShmConnection::forwardTarget(const Forward* forward, size_t bytes) {
  PendingSend* s = firstUnpublished();
  if (s == nullptr || s->forward != forward) {  // sends ahead of it may just not have gone yet
    bool moved = false;
    if (!progressSends(&moved).isOk()) return nullptr;
    s = firstUnpublished();
  }
  if (s == nullptr || s->forward != forward || s->published != forward->landed || bytes > p_.out.slotBytes) {
    return nullptr;
  }
  if (outHead_ - p_.out.control->tail.load(std::memory_order_acquire) >= p_.out.slotCount) return nullptr;
  return s;
}

// Writes bytes into an outbound slot the way `how` says; returns the nanoseconds that took where
// the piece is timed, else 0.
double ShmConnection::writeSlot(char* slot, const char* src, size_t bytes, shm::SlotWrite how) {
  const auto start = how.timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  if (how.streaming) {
    kernels::copyStreaming(slot, src, bytes);
  } else {
    std::memcpy(slot, src, bytes);
  }
  if (!how.timed) return 0;
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
}

// Counts one outbound piece's write and reconsiders how to write the next, with the receiver's
// latest read costs.
void ShmConnection::countWrite(shm::SlotWrite how, size_t bytes, double nanoseconds) {
  if (!how.timed) return;
  writeCosts_.record(how.header(), bytes, nanoseconds, how.current());
  const double plainReads = p_.out.control->readCost(SlotStores::Plain);
  const double streamingReads = p_.out.control->readCost(SlotStores::Streaming);
  storesChooser_.update(writeCosts_, plainReads, streamingReads);
  if (storesChooser_.takeSwitch()) {
    const bool streaming = storesChooser_.current() == SlotStores::Streaming;
    WEFT_INFO("shared memory to rank %d: %s stores now (ns a byte, written + read: plain %.3f + %.3f, streaming "
              "%.3f + %.3f)",
              p_.peerRank, streaming ? "streaming" : "plain", writeCosts_.cost(SlotStores::Plain), plainReads,
              writeCosts_.cost(SlotStores::Streaming), streamingReads);
  }
}

// Brings an inbound piece into this core's cache, one load a cache line, and counts the time
// that took: the cost of the piece's way here alone, not of what it is reduced with or into
// (the reduction then reads it from L2). Publishes the costs for the sender's choice.
void ShmConnection::timeSlotRead(SlotStores stores, bool explores, const char* payload, size_t bytes) {
  const auto start = std::chrono::steady_clock::now();
  uint64_t sum = 0;
  for (size_t at = 0; at < bytes; at += 64) {
    uint64_t word;
    std::memcpy(&word, payload + at, sizeof(word));
    sum += word;
  }
  asm volatile("" : : "r"(sum));  // the loads must happen
  const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
  const shm::SlotWrite how{stores == SlotStores::Streaming, true, explores};  // as the sender chose it
  readCosts_.record(stores, bytes, took.count(), how.current());
  p_.in.control->publishReadCosts(readCosts_.cost(SlotStores::Plain), readCosts_.cost(SlotStores::Streaming));
}

// Fills our next outbound slot's header for `piece` bytes of s (a Data slot's payload is
// written already) and publishes it.
void ShmConnection::publishSlot(PendingSend& s, SlotKind kind, size_t piece, shm::SlotWrite how) {
  SlotHeader* h = p_.out.header(outHead_);
  h->kind = kind;
  h->tag = s.tag;
  h->messageBytes = s.bytes;
  h->pieceBytes = piece;
  h->remoteAddress = kind == SlotKind::Remote ? reinterpret_cast<uint64_t>(s.data) : 0;
  h->stores = how.header();
  h->explores = how.explores ? 1 : 0;  // exploring pieces are always timed
  s.published += piece;
  s.started = true;
  p_.out.control->head.store(++outHead_, std::memory_order_release);
}

Status ShmConnection::progressRecvs(bool* progressed) {
  bool released = false;
  while (!recvs_.empty()) {
    uint64_t head = p_.in.control->head.load(std::memory_order_acquire);
    if (inTail_ == head) break;
    PendingRecv& r = recvs_.front();
    WEFT_TRY(consumeSlot(r, inTail_));
    p_.in.control->tail.store(++inTail_, std::memory_order_release);
    released = true;
    if (r.received == r.bytes) {
      recvs_.pop_front();
      ++recvsCompleted_;
    }
  }
  if (released) {
    *progressed = true;
    ringDoorbell(p_.in.control->senderSleeping);
  }
  return Status::ok();
}

Status ShmConnection::progress(bool* progressed) {
  if (checkControl_) {
    checkControl_ = false;
    WEFT_TRY(drainControl());
  }
  bool moved = false;
  WEFT_TRY(progressSends(&moved));
  WEFT_TRY(progressRecvs(&moved));
  if (moved) *progressed = true;
  // A peer that closed its end can still have left data in the ring: only once nothing moves
  // is its absence an error.
  if (peerClosed_ && !moved && (!sends_.empty() || !recvs_.empty())) return peerGone();
  return Status::ok();
}

bool ShmConnection::prepareToSleep() {
  bool sleep = true;
  if (!recvs_.empty()) {
    auto& flag = p_.in.control->receiverSleeping;
    flag.store(1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (p_.in.control->head.load(std::memory_order_relaxed) != inTail_) {
      flag.store(0, std::memory_order_relaxed);
      sleep = false;
    }
  }
  if (!sends_.empty()) {
    auto& flag = p_.out.control->senderSleeping;
    flag.store(1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    uint64_t tail = p_.out.control->tail.load(std::memory_order_relaxed);
    const PendingSend& f = sends_.front();
    // A forwarded send with nothing landed waits for its receive, which wakes us itself.
    const PendingSend* u = firstUnpublished();
    const bool publishable = u != nullptr && !(u->forward != nullptr && u->published == u->forward->landed);
    bool canMove = (publishable && outHead_ - tail < p_.out.slotCount) || (f.remote && f.started && tail >= f.doneAtTail);
    if (canMove) {
      flag.store(0, std::memory_order_relaxed);
      sleep = false;
    }
  }
  if (sleep) checkControl_ = true;  // poll() may wake for a doorbell or the peer's EOF
  if (sleep && (!sends_.empty() || !recvs_.empty()) && peerProcessGone()) return false;  // progress() says so
  return sleep;
}

// Only while something is pending: an idle connection has nothing to be woken for, and its
// socket may stay readable for good (a doorbell nobody drained, the EOF of a peer that is done).
void ShmConnection::addPollFds(std::vector<pollfd>* fds) const {
  if (!sends_.empty() || !recvs_.empty()) fds->push_back({p_.control.get(), POLLIN, 0});
}

Status ShmConnection::checkPeerAlive() {
  const int control = p_.control.get();
  if (firstHungUp({&control, 1}) >= 0) return peerGone();
  if (peerProcessGone()) return peerGone();
  return Status::ok();
}

}  // namespace weft::transport
