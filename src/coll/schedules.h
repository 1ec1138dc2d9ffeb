// Schedule builders, one per (collective, algorithm). Each returns the steps of this rank
// (shape.rank) over its send, receive and scratch buffers; see schedule.h.
#pragma once

#include <cstdint>

#include "coll/collective.h"
#include "coll/schedule.h"

namespace weft::coll {

// How the pipelined algorithms cut their data: chunks of about chunkBytes, and for those that
// receive into scratch, `slots` chunk buffers so one chunk is on the wire while another is used.
struct PipelineParams {
  size_t chunkBytes = 512 * 1024;
  int slots = 4;
  // A call of at least this many bytes, out of place, writes its final output around the
  // caches (copy_streaming.h): its input and output together fill the rank's share of the
  // cache, so the output cannot stay there, and streaming stores skip reading each output line
  // in first. WEFT_STREAMING_MIN_BYTES, else (left at SIZE_MAX) half the rank's share of its
  // host's last-level cache, set at init. Only local steps depend on it: ranks need not agree.
  size_t streamingMinBytes = SIZE_MAX;
};

// The chunk by the slowest link a communicator uses (WEFT_CHUNK_BYTES overrides). Over shared
// memory a chunk is passed on the moment it has been received, so one that stays in the core's
// second-level cache until then is sent without a trip to memory: at 128 KiB a 2-rank ring
// all-reduce of 16 MiB to 256 MiB took a third less time than at 512 KiB, on a 2-core VM with
// 1 MiB of L2 per core (bench/results/2026-11-25-ring-chunk-order.md). Over sockets every
// message costs a few microseconds of system calls, and 128 KiB chunks took 1.5x as long.
constexpr size_t kSharedMemoryChunkBytes = 128 * 1024;
constexpr size_t kSocketChunkBytes = 512 * 1024;
// The smallest WEFT_CHUNK_BYTES: each chunk is a step of the schedule (about 100 bytes), so a
// 4-byte chunk took 117 MB and 0.3 s to all-reduce 1 MiB; at 1 KiB the schedule is a tenth of
// the data at most, and tests still get many chunks out of small buffers.
constexpr size_t kMinChunkBytes = 1024;

// --- all-reduce ---
// Ring reduce-scatter then all-gather, each block cut into chunks that flow through scratch
// slots, so one chunk is on the wire while another is reduced. With shape.recvReduce, each
// reduce-scatter chunk is reduced straight out of the transport's staging memory instead.
Schedule buildRingAllReduce(const CollectiveShape& shape, const PipelineParams& pipeline);
// Recursive doubling over the largest power of two of ranks, the others folded in first and
// answered last: log2(n) + 2 rounds of whole-buffer exchanges, for small messages.
Schedule buildRecursiveDoublingAllReduce(const CollectiveShape& shape);
// Every rank sends its whole input to every other rank and reduces all n inputs itself, in
// rank order: one round of n-1 concurrent exchanges, for small messages on few ranks.
Schedule buildOneShotAllReduce(const CollectiveShape& shape);
// Over the planned double binary tree (rank_order.h): each half of the buffer reduced up one
// tree and broadcast back down it, pipelined by chunks.
Schedule buildTreeAllReduce(const CollectiveShape& shape, const PipelineParams& pipeline);

// --- broadcast and reduce (rooted) ---
// A chain from the root through every rank in planned ring order, pipelined by chunks: each
// rank sends the data once, the bandwidth-optimal choice for large messages.
Schedule buildRingBroadcast(const CollectiveShape& shape, const PipelineParams& pipeline);
// The chain backwards: partial reductions flow toward the root, each rank adding its input.
Schedule buildRingReduce(const CollectiveShape& shape, const PipelineParams& pipeline);
// A binary tree rooted at the root over ring positions (children 2v+1, 2v+2 of virtual
// position v): depth log2(n).
Schedule buildTreeBroadcast(const CollectiveShape& shape, const PipelineParams& pipeline);
// The root sends the whole buffer to every peer at once: one hop, n-1 messages from the root.
Schedule buildOneShotBroadcast(const CollectiveShape& shape);
Schedule buildTreeReduce(const CollectiveShape& shape, const PipelineParams& pipeline);

// --- all-gather and reduce-scatter ---
// Blocks passed (reduced) around the planned ring in n-1 pipelined steps.
Schedule buildRingAllGather(const CollectiveShape& shape, const PipelineParams& pipeline);
Schedule buildRingReduceScatter(const CollectiveShape& shape, const PipelineParams& pipeline);
// One round: every rank sends each peer what it needs directly (reduce-scatter reduces the
// n contributions to its block in rank order).
Schedule buildOneShotAllGather(const CollectiveShape& shape);
Schedule buildOneShotReduceScatter(const CollectiveShape& shape);

// --- personalized exchanges and point-to-point ---
Schedule buildAlltoAll(const CollectiveShape& shape);
Schedule buildGather(const CollectiveShape& shape);
Schedule buildScatter(const CollectiveShape& shape);
Schedule buildSend(const CollectiveShape& shape);  // shape.root is the peer
Schedule buildRecv(const CollectiveShape& shape);

}  // namespace weft::coll
