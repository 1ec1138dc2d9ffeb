#include "api/buffer_use.h"

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <vector>

#include "kernels/cpu/reduce.h"

namespace weft::api {

using coll::Collective;

Result<BufferUse> bufferUse(const char* fn, const core::CollectiveCall& call, int rank, int nranks) {
  BufferUse use;
  const size_t elementSize = kernels::dataTypeSize(call.type);
  const auto n = static_cast<size_t>(nranks);
  const size_t bytes = call.count * elementSize;
  const bool blocked = call.collective == Collective::AllGather || call.collective == Collective::ReduceScatter ||
                       call.collective == Collective::AlltoAll || call.collective == Collective::Gather ||
                       call.collective == Collective::Scatter;
  if (blocked && call.count > SIZE_MAX / elementSize / n) {
    return Status(weftInvalidArgument, formatString("%s: count %zu x %d ranks of %s overflows the address space", fn,
                                                    call.count, nranks, kernels::dataTypeName(call.type)));
  }
  const size_t all = bytes * n;
  const bool root = rank == call.root;
  const auto myBlock = static_cast<ptrdiff_t>(bytes * static_cast<size_t>(rank));
  const char* inRecv = "sendbuff == recvbuff + rank * count";  // the rank's block of the output
  const char* inSend = "recvbuff == sendbuff + rank * count";  // the rank's block of the input
  switch (call.collective) {
    case Collective::AllReduce: use.sendBytes = use.recvBytes = bytes; break;
    case Collective::Broadcast: use.send = root; use.sendBytes = use.recvBytes = bytes; break;
    case Collective::Reduce: use.recv = root; use.sendBytes = use.recvBytes = bytes; break;
    case Collective::AllGather:
      use.sendBytes = bytes; use.recvBytes = all; use.inPlaceOffset = myBlock; use.inPlaceForm = inRecv; break;
    case Collective::ReduceScatter:
      use.sendBytes = all; use.recvBytes = bytes; use.inPlaceOffset = -myBlock; use.inPlaceForm = inSend; break;
    case Collective::AlltoAll: use.sendBytes = use.recvBytes = all; break;
    case Collective::Gather:
      use.recv = root; use.sendBytes = bytes; use.recvBytes = all; use.inPlaceOffset = myBlock;
      use.inPlaceForm = inRecv; break;
    case Collective::Scatter:
      use.send = root; use.sendBytes = all; use.recvBytes = bytes; use.inPlaceOffset = -myBlock;
      use.inPlaceForm = inSend; break;
    case Collective::Send: use.recv = false; use.sendBytes = bytes; break;
    case Collective::Recv: use.send = false; use.recvBytes = bytes; break;
  }
  return use;
}

namespace {

struct Span {
  uintptr_t begin, end;
  size_t call;
  bool writes;
};

// The two spans seen so far that end furthest, from different calls: whichever is not from
// `call` is the furthest-reaching one an overlap with `call` must be checked against.
struct Reach {
  const Span* first = nullptr;
  const Span* second = nullptr;

  void add(const Span& s) {
    if (first == nullptr || s.end > first->end) {
      if (first != nullptr && first->call != s.call) second = first;
      first = &s;
    } else if (s.call != first->call && (second == nullptr || s.end > second->end)) {
      second = &s;
    }
  }
  const Span* otherThan(size_t call) const { return first != nullptr && first->call != call ? first : second; }
};

}  // namespace

std::optional<std::pair<size_t, size_t>> firstWriteOverlap(std::span<const RankedCall> calls) {
  if (calls.size() < 2) return std::nullopt;
  std::vector<Span> spans;
  for (size_t i = 0; i < calls.size(); ++i) {
    const core::CollectiveCall& call = calls[i].call;
    const BufferUse use = bufferUse("weftGroupEnd", call, calls[i].rank, calls[i].nranks).take();  // checked alone before
    const auto send = reinterpret_cast<uintptr_t>(call.send), recv = reinterpret_cast<uintptr_t>(call.recv);
    if (use.send && use.sendBytes > 0) spans.push_back({send, send + use.sendBytes, i, false});
    if (use.recv && use.recvBytes > 0) spans.push_back({recv, recv + use.recvBytes, i, true});
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  Reach any, writes;  // over the spans that begin at or before the current one
  for (const Span& s : spans) {
    // A write meets anything of another call still open here; a read meets only writes.
    const Span* other = (s.writes ? any : writes).otherThan(s.call);
    if (other != nullptr && other->end > s.begin) return std::pair{std::min(s.call, other->call), std::max(s.call, other->call)};
    any.add(s);
    if (s.writes) writes.add(s);
  }
  return std::nullopt;
}

namespace {

// Whether the first and last of `bytes` at `p` are mapped; true where the kernel cannot say
// (process_vm_readv refused, by seccomp say): only EFAULT is an answer.
bool rangeMapped(const void* p, size_t bytes) {
  const auto begin = reinterpret_cast<uintptr_t>(p);
  if (begin + (bytes - 1) < begin) return false;  // past the end of the address space
  char first = 0, last = 0;
  iovec local[2] = {{&first, 1}, {&last, 1}};
  iovec remote[2] = {{reinterpret_cast<void*>(begin), 1}, {reinterpret_cast<void*>(begin + (bytes - 1)), 1}};
  const ssize_t got = process_vm_readv(getpid(), local, 2, remote, 2, 0);
  return got == 2 || (got < 0 && errno != EFAULT);
}

}  // namespace

Status checkHostBuffersMapped(const char* fn, const core::CollectiveCall& call, const BufferUse& use) {
  const struct {
    bool used;
    const void* at;
    size_t bytes;
    const char* name;
  } buffers[] = {{use.send, call.send, use.sendBytes, "sendbuff"}, {use.recv, call.recv, use.recvBytes, "recvbuff"}};
  for (const auto& b : buffers) {
    if (!b.used || b.at == nullptr || b.bytes < kMappedCheckBytes || rangeMapped(b.at, b.bytes)) continue;
    return Status(weftInvalidArgument,
                  formatString("%s: %s %p holds no %zu bytes of mapped memory (count %zu of %s): is count larger "
                               "than the buffer?", fn, b.name, b.at, b.bytes, call.count,
                               kernels::dataTypeName(call.type)));
  }
  return Status::ok();
}

}  // namespace weft::api
