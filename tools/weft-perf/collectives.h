// The collectives weft-perf times, with nccl-tests' conventions: the row's size S is the total
// bytes of the larger buffer (all-gather's output, reduce-scatter's input, alltoall's buffer),
// the per-rank count is S / n for the blocked collectives, and busbw = algbw x a factor that
// makes it comparable to link bandwidth (all-reduce 2(n-1)/n; all-gather, reduce-scatter,
// alltoall, gather and scatter (n-1)/n; broadcast, reduce and sendrecv 1).
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include "check_data.h"
#include "weft/weft.h"

namespace weftperf {

enum class CollectiveId { AllReduce, Broadcast, Reduce, AllGather, ReduceScatter, AlltoAll, SendRecv, Gather, Scatter };

struct Collective {
  const char* name;  // as on the command line and in the table
  CollectiveId id;
  bool reduces;
  bool rooted;
  bool blocked;  // counts are per rank: the row's count divided by n

  double busFactor(int nranks) const;
  // Elements in the send and receive buffers of `rank` for a row of `count` elements (the
  // blocked collectives' count already rounded to a multiple of n).
  size_t sendElements(size_t count, int nranks, int rank, int root) const;
  size_t recvElements(size_t count, int nranks, int rank, int root) const;
  // The count argument of the Weft call.
  size_t callCount(size_t count, int nranks) const { return blocked ? count / static_cast<size_t>(nranks) : count; }
  // Whether `rank`'s receive buffer holds a result to check.
  bool hasResult(int rank, int root) const { return !rooted || id == CollectiveId::Broadcast || id == CollectiveId::Scatter || rank == root; }
  // The element offsets of an in-place call: send == recv + offset (recv == send - offset).
  long inPlaceOffset(size_t count, int nranks, int rank, int root) const;
};

// Where one call's buffers lie, in elements. Out of place: the send buffer is separate, the
// receive buffer starts at 0 of the output arena. In place, both lie in the output arena at
// NCCL's layout. guardBegin is where the arena's used part ends (stray writes show past it).
struct BufferLayout {
  bool inPlace;
  size_t sendBegin = 0, recvBegin = 0;  // in place: offsets in the arena
  size_t sendElements = 0, recvElements = 0;
  size_t guardBegin = 0;
};
BufferLayout layoutFor(const Collective& collective, bool inPlace, size_t count, int nranks, int rank, int root);

const std::vector<Collective>& allCollectives();
const Collective* findCollective(std::string_view name);

struct CallArgs {
  const Collective& collective;
  const void* send;
  void* recv;
  size_t count;  // the row's
  const DataType& type;
  weftRedOp_t op;
  int root;
  weftComm_t comm;
  int rank;
  int nranks;
  bool inPlace;
  weftStream_t stream = nullptr;
};

// Issues the collective (on args.stream; NULL: blocking). sendrecv sends to rank+1 and receives from rank-1 in a group.
weftResult_t runCollective(const CallArgs& args);

// What element `index` of `rank`'s receive buffer must hold, with every rank's send buffer
// filled by pattern.fill(buffer, rank, sendElements).
double expectedElement(const Collective& collective, const CheckPattern& pattern, size_t count, int nranks, int rank,
                       int root, size_t index);

}  // namespace weftperf
