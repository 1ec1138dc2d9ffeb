#include "coll/direct_allreduce.h"

#include <sched.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "coll/arena_wait.h"
#include "kernels/cpu/copy_streaming.h"
#include "kernels/cpu/reduce.h"

namespace weft::coll {

namespace {

// What each rank publishes in the first round: where its buffers lie (id 0: not
// shared).
struct Placement {
  transport::SharedRange send;
  transport::SharedRange recv;
};

// Rank r's block: elements [blockStart(r), blockStart(r + 1)).
size_t blockStart(size_t count, int n, int r) {
  const auto rr = static_cast<size_t>(r);
  const size_t nn = static_cast<size_t>(n);
  return rr * (count / nn) + std::min(rr, count % nn);
}

// Sums run a chunk at a time, so that with 3+ ranks the partial sum stays in
// cache between inputs.
constexpr size_t kChunkBytes = 128 * 1024;

void copy(char* dst, const char* src, size_t bytes, bool streaming) {
  if (streaming) {
    kernels::copyStreaming(dst, src, bytes);
  } else {
    std::memcpy(dst, src, bytes);
  }
}

// Publishes this rank's slot of call `s` and waits for every peer's; with `gaveUpSeq`, a peer's
// mark on that call ends the wait (awaitPublished).
Status publishAndAwait(transport::ShmArena& arena, uint32_t s, uint32_t bytes, uint64_t tag,
                       const ExecutionContext& context, std::optional<Deadline>* deadline,
                       std::optional<uint32_t> gaveUpSeq = std::nullopt) {
  arena.publish(s, bytes, tag);
  for (int k = 1; k < arena.size(); ++k) {
    const int peer = (arena.rank() + k) % arena.size();
    WEFT_TRY(awaitPublished(arena, peer, s, context, deadline, gaveUpSeq));
    Status same = checkSameCall(arena, peer, s, bytes, tag, context);
    // After the check: a mark made while it read reads as a mismatch, which the mark explains.
    if (arena.gaveUp(peer, s)) return checkNoneGaveUp(arena, s, context);
    WEFT_TRY(same);
  }
  return Status::ok();
}

// How long a rank that gave up waits for its peers to stop writing into its buffers.
constexpr int kPeersStopMs = 200;

// After this rank marked call `mappedSeq` as given up: waits (at most kPeersStopMs) until every
// peer that may be writing into this rank's buffers has finished (published the next call) or
// given up too, so that none writes there once the caller has them back. A peer that has not
// published `mappedSeq` needs no wait: it checks the marks before its first write, and since
// this rank's mark came before its look, the peer sees the mark (both sequentially consistent).
// A peer stopped for longer (a debugger, SIGSTOP) may still write one chunk after this returns.
// Where a rank said it could not map (its byte in that round is 0), every rank takes the
// copying path and none writes here.
void awaitPeersStopped(const transport::ShmArena& arena, uint32_t mappedSeq) {
  for (int peer = 0; peer < arena.size(); ++peer) {
    const bool said = peer == arena.rank() || arena.published(peer, mappedSeq);
    if (said && *static_cast<const uint8_t*>(arena.peerData(peer, mappedSeq, 1)) == 0) return;
  }
  const Deadline deadline = Deadline::afterMs(kPeersStopMs);
  for (int peer = 0; peer < arena.size(); ++peer) {
    if (peer == arena.rank()) continue;
    while (arena.published(peer, mappedSeq) && !arena.gaveUp(peer, mappedSeq) &&
           !arena.published(peer, mappedSeq + 1)) {
      if (deadline.expired()) return;
      ::sched_yield();
    }
  }
}

}  // namespace

size_t directStreamingMinBytes(size_t streamingMinBytes, bool setByUser, size_t privateCacheBytes,
                               double ranksPerCpu) {
  if (setByUser || privateCacheBytes == 0) return streamingMinBytes;
  const auto share = static_cast<size_t>(static_cast<double>(privateCacheBytes) / std::max(1.0, ranksPerCpu));
  return std::min(streamingMinBytes, std::max<size_t>(share, 1));
}

Result<bool> directAllReduce(transport::ShmArena& arena, uint32_t* seq, transport::PeerAllocations& peers,
                             const DirectAllReduce& call, const ExecutionContext& context, std::string* whyNot) {
  const int n = arena.size();
  const int me = arena.rank();
  const size_t element = kernels::dataTypeSize(call.type);
  const size_t bytes = call.count * element;
  std::optional<Deadline> deadline;
  peers.trim();  // the last call's pointers are done with; this call's stay mapped until the next

  // Round 1: where every rank's buffers lie.
  Placement mine;
  const auto send = transport::findSharedHostMemory(call.send, bytes);
  const auto recv = transport::findSharedHostMemory(call.recv, bytes);
  if (send && recv) mine = Placement{*send, *recv};
  uint32_t s = ++*seq;
  std::memcpy(arena.ownData(s, sizeof(Placement)), &mine, sizeof(Placement));
  WEFT_TRY(publishAndAwait(arena, s, sizeof(Placement), call.tag, context, &deadline));
  std::vector<Placement> all(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    std::memcpy(&all[static_cast<size_t>(r)], arena.peerData(r, s, sizeof(Placement)), sizeof(Placement));
    if (all[static_cast<size_t>(r)].send.id == 0) {
      *whyNot = formatString("rank %d's buffers are not all from weftHostMemAlloc", r);
      return false;
    }
  }

  // Round 2: whether every rank mapped every peer's buffers.
  std::vector<const char*> sends(static_cast<size_t>(n));
  std::vector<char*> recvs(static_cast<size_t>(n));
  sends[static_cast<size_t>(me)] = static_cast<const char*>(call.send);
  recvs[static_cast<size_t>(me)] = static_cast<char*>(call.recv);
  uint8_t mapped = 1;
  for (int r = 0; r < n && mapped; ++r) {
    if (r == me) continue;
    const Placement& p = all[static_cast<size_t>(r)];
    auto sendAt = peers.map(p.send, bytes);
    auto recvAt = sendAt.isOk() ? peers.map(p.recv, bytes) : Result<char*>(sendAt.status());
    if (!recvAt.isOk()) {
      mapped = 0;
      *whyNot = formatString("rank %d cannot map rank %d's buffers: %s", me, r, recvAt.status().message().c_str());
    } else {
      sends[static_cast<size_t>(r)] = sendAt.value();
      recvs[static_cast<size_t>(r)] = recvAt.value();
    }
  }
  // Once this rank says it mapped every peer's buffers, its peers may start on its own: from
  // here, if it fails (its timeout, an abort, a peer that gave up), it marks this round's slot
  // before returning, and each rank checks its peers' marks between chunks and at the end, so
  // that none reports success from buffers a failed rank's caller may already be reusing.
  const uint32_t mappedSeq = s = ++*seq;
  auto giveUp = [&](Status failure) {
    arena.markGaveUp(mappedSeq);
    awaitPeersStopped(arena, mappedSeq);
    return failure;
  };
  *static_cast<uint8_t*>(arena.ownData(s, 1)) = mapped;
  if (Status st = publishAndAwait(arena, s, 1, call.tag, context, &deadline, mappedSeq); !st.isOk()) {
    return giveUp(st);
  }
  for (int r = 0; r < n; ++r) {
    if (*static_cast<const uint8_t*>(arena.peerData(r, s, 1)) == 0) {
      if (r != me) *whyNot = formatString("rank %d could not map its peers' buffers", r);
      return false;
    }
  }

  // This rank's block: every rank's input reduced in rank order and written to every rank's
  // output (this rank's first), one pass a cache line at a time (kernels::reduceMany), so each
  // input byte is read once and each output byte written once. Only this rank reads or writes
  // block `me` of any buffer, so in place a line's inputs are all read before its outputs are
  // written; and there its lines are in cache already (just read), so plain stores. Out of
  // place, streaming stores where the call is too large for the caches (a plain store would
  // read each output line first: see kernels/cpu/copy_streaming.h). Avg sums into a chunk of
  // scratch that stays in cache, divides it there, then copies it out.
  const bool avg = call.op == weftAvg;
  const bool streaming = call.streaming && call.recv != call.send;
  const size_t first = blockStart(call.count, n, me);
  const size_t last = blockStart(call.count, n, me + 1);
  const size_t chunk = std::max<size_t>(1, kChunkBytes / element);
  // Made once per thread: at kChunkBytes, malloc would map and unmap it on every call.
  thread_local const std::unique_ptr<char[]> partial(new char[kChunkBytes]);
  std::vector<const void*> ins(static_cast<size_t>(n));
  std::vector<void*> outs(static_cast<size_t>(n));
  for (size_t at = first; at < last; at += chunk) {
    if (Status st = checkNoneGaveUp(arena, mappedSeq, context); !st.isOk()) return giveUp(st);
    const size_t c = std::min(chunk, last - at);
    const size_t offset = at * element;
    for (int r = 0; r < n; ++r) {
      ins[static_cast<size_t>(r)] = sends[static_cast<size_t>(r)] + offset;
      outs[static_cast<size_t>(r)] = recvs[static_cast<size_t>((me + r) % n)] + offset;
    }
    if (!avg) {
      kernels::reduceMany({.outs = outs.data(), .outCount = n, .ins = ins.data(), .inCount = n, .count = c,
                           .type = call.type, .op = call.op, .streaming = streaming});
      continue;
    }
    void* sum = partial.get();
    kernels::reduceMany({.outs = &sum, .outCount = 1, .ins = ins.data(), .inCount = n, .count = c,
                         .type = call.type, .op = weftSum, .streaming = false});
    kernels::divide(sum, sum, c, call.type, static_cast<uint64_t>(n));
    for (void* out : outs) copy(static_cast<char*>(out), partial.get(), c * element, streaming);
  }

  // Round 3: every rank has written its block everywhere, so none returns (and
  // lets its caller reuse its buffers) while a peer still reads or writes them.
  s = ++*seq;
  if (Status st = publishAndAwait(arena, s, 0, call.tag, context, &deadline, mappedSeq); !st.isOk()) {
    return giveUp(st);
  }
  if (Status st = checkNoneGaveUp(arena, mappedSeq, context); !st.isOk()) return giveUp(st);
  return true;
}

}  // namespace weft::coll
