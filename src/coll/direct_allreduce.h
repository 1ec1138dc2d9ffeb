// An all-reduce among the ranks of one host whose buffers all lie in shared
// host memory (weftHostMemAlloc, transport/shm/shared_host_memory.h): each rank
// maps its peers' buffers and works on them where they lie. Rank r sums block r
// of every rank's input, in rank order, and writes the sum into block r of
// every rank's output. Each byte of input is read once and each byte of output
// written once, where a path through shared-memory segments also copies every
// input in and every sum out (and where having each rank copy the other blocks
// out of the rank that summed them reads every output byte once more).
//
// Three rounds on the arena (transport/shm/shm_arena.h) order it: every rank
// publishes where its buffers lie, then whether it could map every peer's, then
// that it has written its block everywhere (so none returns while a peer still
// reads its input or writes its output). If any rank's buffers are not shared,
// or any rank cannot map a peer's, every rank sees it after the first or second
// round and nothing has been written: the call then takes the usual path, alike
// everywhere. A rank that fails after the second round marks its slot as given
// up (ShmArena::markGaveUp), and its peers then fail too rather than report
// success from buffers its caller may be reusing.
#pragma once

#include <cstdint>
#include <string>

#include "coll/executor.h"
#include "transport/shm/shared_host_memory.h"
#include "transport/shm/shm_arena.h"

namespace weft::coll {

// The smallest all-reduce that tries the direct path. On the 2-core development
// VM it was faster than the ring from 256 KiB to 2 MiB on 2 and 4 ranks, by
// medians of 1.1-2.4x out of place and 1.2-2.5x in place
// (bench/results/2026-11-29-direct-allreduce-threshold.md), and faster down to
// 32 KiB; but where some rank's buffers are not shared, the first round is a
// cost the copying path pays for nothing, about 1-2 us: 10% of a 64 KiB
// all-reduce, up to 4% at 256 KiB (medians of paired rounds), less above.
constexpr size_t kDirectMinBytes = 256 * 1024;

struct DirectAllReduce {
  const void* send;
  void* recv;
  size_t count;
  weftDataType_t type;
  weftRedOp_t op;  // Sum, Prod, Max, Min or Avg (whose inputs need no dividing first)
  uint64_t tag;    // equal on every rank of one call (see transport.h's MessageTag)
  bool streaming;  // write the output around the caches (it is larger than they
                   // hold)
};

// From what size the direct all-reduce writes its output with streaming stores. A rank writes
// its block of every rank's output, the call's bytes in all, and reads none of it back; once
// that is more than its share of its core's L2 (the cache that is its own, where the L3 is
// shared with the host's other ranks and, on a VM, with other tenants), a plain store first
// fetches each output line from farther out. On the 2-vCPU Intel VM (2 MiB of L2 a core),
// 2 ranks: 1.28x at 2 MiB and 1.14x at 4 MiB against the ring's switch at 8 MiB
// (bench/results/2026-12-03-direct-streaming-l2.md). Never later than that switch
// (`streamingMinBytes`), which is taken as it is where the user set it
// (WEFT_STREAMING_MIN_BYTES) or where the L2 is unknown (`privateCacheBytes` 0).
size_t directStreamingMinBytes(size_t streamingMinBytes, bool setByUser, size_t privateCacheBytes,
                               double ranksPerCpu);

// Runs the call directly and returns true; or returns false, having written
// nothing, when some rank's buffers are not shared or cannot be mapped (*whyNot
// says which). Uses three arena calls (*seq counts them) or, returning false,
// one or two, alike on every rank.
Result<bool> directAllReduce(transport::ShmArena& arena, uint32_t* seq, transport::PeerAllocations& peers,
                             const DirectAllReduce& call, const ExecutionContext& context, std::string* whyNot);

}  // namespace weft::coll
