#include "collectives.h"

#include <algorithm>

namespace weftperf {

const std::vector<Collective>& allCollectives() {
  static const std::vector<Collective> all = {
      {"allreduce", CollectiveId::AllReduce, true, false, false},
      {"broadcast", CollectiveId::Broadcast, false, true, false},
      {"reduce", CollectiveId::Reduce, true, true, false},
      {"allgather", CollectiveId::AllGather, false, false, true},
      {"reducescatter", CollectiveId::ReduceScatter, true, false, true},
      {"alltoall", CollectiveId::AlltoAll, false, false, true},
      {"sendrecv", CollectiveId::SendRecv, false, false, false},
      {"gather", CollectiveId::Gather, false, true, true},
      {"scatter", CollectiveId::Scatter, false, true, true},
  };
  return all;
}

const Collective* findCollective(std::string_view name) {
  for (const Collective& c : allCollectives()) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

double Collective::busFactor(int nranks) const {
  const double n = nranks;
  switch (id) {
    case CollectiveId::AllReduce: return 2.0 * (n - 1) / n;
    case CollectiveId::Broadcast:
    case CollectiveId::Reduce:
    case CollectiveId::SendRecv: return 1.0;
    default: return (n - 1) / n;
  }
}

size_t Collective::sendElements(size_t count, int nranks, int rank, int root) const {
  const size_t block = callCount(count, nranks);
  switch (id) {
    case CollectiveId::AllGather:
    case CollectiveId::Gather: return block;
    case CollectiveId::Broadcast: return rank == root ? count : 0;
    case CollectiveId::Scatter: return rank == root ? count : 0;
    default: return count;
  }
}

size_t Collective::recvElements(size_t count, int nranks, int rank, int root) const {
  const size_t block = callCount(count, nranks);
  switch (id) {
    case CollectiveId::ReduceScatter:
    case CollectiveId::Scatter: return block;
    case CollectiveId::Reduce:
    case CollectiveId::Gather: return rank == root ? count : 0;
    default: return count;
  }
}

long Collective::inPlaceOffset(size_t count, int nranks, int rank, int /*root*/) const {
  const auto mine = static_cast<long>(callCount(count, nranks) * static_cast<size_t>(rank));
  switch (id) {
    case CollectiveId::AllGather:
    case CollectiveId::Gather: return mine;
    case CollectiveId::ReduceScatter:
    case CollectiveId::Scatter: return -mine;
    default: return 0;
  }
}

BufferLayout layoutFor(const Collective& c, bool inPlace, size_t count, int nranks, int rank, int root) {
  BufferLayout l{inPlace};
  l.sendElements = c.sendElements(count, nranks, rank, root);
  l.recvElements = c.recvElements(count, nranks, rank, root);
  if (inPlace) {
    const long offset = c.inPlaceOffset(count, nranks, rank, root);
    l.sendBegin = offset > 0 ? static_cast<size_t>(offset) : 0;
    l.recvBegin = offset < 0 ? static_cast<size_t>(-offset) : 0;
  }
  l.guardBegin = inPlace ? std::max(l.sendBegin + l.sendElements, l.recvBegin + l.recvElements) : l.recvElements;
  return l;
}

weftResult_t runCollective(const CallArgs& a) {
  const size_t n = a.collective.callCount(a.count, a.nranks);
  const weftDataType_t t = a.type.id;
  switch (a.collective.id) {
    case CollectiveId::AllReduce: return weftAllReduce(a.send, a.recv, n, t, a.op, a.comm, a.stream);
    case CollectiveId::Broadcast: return weftBroadcast(a.send, a.recv, n, t, a.root, a.comm, a.stream);
    case CollectiveId::Reduce: return weftReduce(a.send, a.recv, n, t, a.op, a.root, a.comm, a.stream);
    case CollectiveId::AllGather: return weftAllGather(a.send, a.recv, n, t, a.comm, a.stream);
    case CollectiveId::ReduceScatter: return weftReduceScatter(a.send, a.recv, n, t, a.op, a.comm, a.stream);
    case CollectiveId::AlltoAll: return weftAlltoAll(a.send, a.recv, n, t, a.comm, a.stream);
    case CollectiveId::Gather: return weftGather(a.send, a.recv, n, t, a.root, a.comm, a.stream);
    case CollectiveId::Scatter: return weftScatter(a.send, a.recv, n, t, a.root, a.comm, a.stream);
    case CollectiveId::SendRecv: {
      weftResult_t r = weftGroupStart();
      if (r != weftSuccess) return r;
      weftResult_t sent = weftSend(a.send, n, t, (a.rank + 1) % a.nranks, a.comm, a.stream);
      weftResult_t received = weftRecv(a.recv, n, t, (a.rank + a.nranks - 1) % a.nranks, a.comm, a.stream);
      r = weftGroupEnd();
      return sent != weftSuccess ? sent : received != weftSuccess ? received : r;
    }
  }
  return weftInvalidArgument;
}

double expectedElement(const Collective& c, const CheckPattern& pattern, size_t count, int nranks, int rank, int root,
                       size_t index) {
  const size_t block = c.callCount(count, nranks);
  const auto r = static_cast<size_t>(rank);
  switch (c.id) {
    case CollectiveId::AllReduce:
    case CollectiveId::Reduce: return pattern.expected(index);
    case CollectiveId::ReduceScatter: return pattern.expected(r * block + index);
    case CollectiveId::Broadcast: return pattern.value(root, index);
    case CollectiveId::AllGather:
    case CollectiveId::Gather: return pattern.value(static_cast<int>(index / block), index % block);
    case CollectiveId::AlltoAll: return pattern.value(static_cast<int>(index / block), r * block + index % block);
    case CollectiveId::Scatter: return pattern.value(root, r * block + index);
    case CollectiveId::SendRecv: return pattern.value((rank + nranks - 1) % nranks, index);
  }
  return 0;
}

}  // namespace weftperf
