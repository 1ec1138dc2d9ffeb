// Torch's CPU allocator in a process that runs a "weft" process group: tensors of 256 KiB or
// more get their memory from weftHostMemAlloc, so that an all-reduce among ranks on one host
// (DDP's gradient buckets above all) reads and writes the peers' tensors where they lie, Weft's
// direct all-reduce, instead of copying them through shared-memory segments. Smaller tensors
// come from the allocator installed before, as do large ones where shared memory is refused.
//
// Nothing is moved: a tensor's memory is shared from the moment it is allocated, so every
// pointer to it (numpy views included) stays good. Freed blocks are kept for reuse by size
// class (shared_block_pool.hpp), which also spares peers a new mapping and each step the page
// faults of fresh memory. A DataLoader worker or any other child made by fork maps every block
// privately (weftHostMemAlloc's fork rule): its writes stay its own, and a tensor it inherited
// shows the parent's later writes to it, as a tensor in torch's shared memory would.
#pragma once

#include <cstddef>
#include <cstdint>

namespace weft_torch {

// The smallest tensor that gets shared memory: Weft's direct all-reduce starts here
// (coll::kDirectMinBytes).
constexpr size_t kSharedMinBytes = 256 * 1024;

// Installs the allocator, once per process; later calls do nothing. Not where
// WEFT_TORCH_SHARED_MEMORY=0, nor where the launcher says this rank is alone on its host
// (LOCAL_WORLD_SIZE=1, or Open MPI's, MPICH's or Slurm's count of local ranks).
void installSharedCpuAllocator();

struct SharedMemoryStats {
  bool installed = false;
  size_t liveBlocks = 0;  // blocks in use by tensors, and their bytes (whole size classes)
  size_t liveBytes = 0;
  size_t peakLiveBytes = 0;  // the most live bytes at once, which kept bytes never pass
  size_t cachedBlocks = 0;   // freed blocks kept for reuse
  size_t cachedBytes = 0;
  uint64_t reused = 0;     // allocations served from the cache
  uint64_t fellBack = 0;   // large allocations given ordinary memory (a cap reached, or refused)
};
SharedMemoryStats sharedMemoryStats();
// Gives the kept blocks back to the system (as torch.cuda.empty_cache does); returns their bytes.
size_t releaseSharedMemoryCache();

}  // namespace weft_torch
