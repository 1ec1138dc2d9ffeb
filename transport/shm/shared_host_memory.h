// Host memory the ranks of one host can read and write directly (weftHostMemAlloc): each
// allocation is an anonymous memfd mapped into this process, and a peer on the
// host maps the same pages by opening /proc/<pid>/fd/<fd> (which needs the same
// access as process_vm_readv: the same user and ptrace read permission). A
// memfd has no name in /dev/shm, so nothing is left behind whatever happens to
// the processes.
//
// A child made by fork maps every allocation again, privately, at the same address: its
// writes stay its own (pages it has not written show the parent's later writes), and
// findSharedHostMemory no longer offers it to peers.
//
// All-reduces whose buffers every rank took from here read the peers' inputs
// and write their outputs where they lie (coll/direct_allreduce.h): no copy
// into or out of a shared segment.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <optional>

#include "util/status.h"

namespace weft::transport {

// Where a buffer lies within a shared allocation, as a peer on the host needs
// it to map the allocation: fixed-size, it travels through the arena.
struct SharedRange {
  uint64_t id = 0;      // the allocation's number in its process (never reused; 0: none)
  uint64_t device = 0;  // the memfd's st_dev and st_ino, which the mapper checks
  uint64_t inode = 0;
  uint64_t allocationBytes = 0;  // the whole allocation's size
  uint64_t offset = 0;           // the buffer's start within it
  int32_t pid = 0;               // the owner, as this host's /proc names it
  int32_t fd = -1;               // the owner's descriptor of the memfd
};

// A new allocation of `bytes` (> 0), page-aligned; its pages come on first
// touch, as malloc's do (a memfd is not in /dev/shm, so no tmpfs limit
// applies). weftSystemError names the cause, e.g. a size beyond this host's
// memory and swap.
Result<void*> allocateSharedHostMemory(size_t bytes);
// Frees an allocation from allocateSharedHostMemory (its start); anything else
// is weftInvalidArgument. Peers that mapped it keep its pages until they drop
// their mapping.
Status freeSharedHostMemory(void* ptr);
// The allocation holding all of [ptr, ptr + bytes), if any.
std::optional<SharedRange> findSharedHostMemory(const void* ptr, size_t bytes);

// The peers' allocations this process has mapped (by owner and id), the most
// recently used first. A call maps what it needs (however many); trim() then
// unmaps the least recently used beyond kMaxMappings, between calls, so that
// no pointer a call still uses goes away under it.
class PeerAllocations {
 public:
  static constexpr size_t kMaxMappings = 64;

  PeerAllocations() = default;
  PeerAllocations(const PeerAllocations&) = delete;
  PeerAllocations& operator=(const PeerAllocations&) = delete;
  ~PeerAllocations();

  // Where `range`'s buffer of `bytes` bytes lies in this process (mapped
  // for reading and writing), mapping its allocation on first use; an error says why it
  // cannot be (no permission, not the file the owner named, a range outside
  // it).
  Result<char*> map(const SharedRange& range, size_t bytes);
  // Unmaps the least recently used allocations beyond kMaxMappings: what map()
  // returned before must no longer be in use.
  void trim();

 private:
  struct Mapping {
    int32_t pid;
    uint64_t id;
    uint64_t inode;
    char* base;
    size_t bytes;
  };
  std::list<Mapping> mappings_;
};

}  // namespace weft::transport
