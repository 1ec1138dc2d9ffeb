#include "shared_cpu_allocator.hpp"

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>

#include "shared_block_pool.hpp"

namespace weft_torch {

namespace {

constexpr size_t kPage = 4096;
// Larger requests are left to the allocator before (no size class could be worked out safely,
// and no host has the memory).
constexpr size_t kLargestShared = size_t{1} << 48;

// A block's size: whole pages, at most an eighth above the request (eight classes per
// doubling), so that a freed block serves the next tensor of about its size. The pages past a
// tensor's end are never touched, so they cost address space only.
size_t sizeClass(size_t bytes) {
  const size_t pages = (bytes + kPage - 1) / kPage;
  const int top = 63 - __builtin_clzll(pages);
  const size_t step = top > 3 ? size_t{1} << (top - 3) : 1;
  return (pages + step - 1) / step * step * kPage;
}

BlockPool* pool = nullptr;            // set once, when the allocator is installed
c10::Allocator* before = nullptr;     // the allocator installed before: small tensors
c10::DeleterFnPtr beforeRaw = nullptr;  // its raw deleter, where it has one

// A DataPtr's deleter, for blocks and (wrapped) the allocator before's memory alike: torch's
// raw_allocate/raw_deallocate need one deleter for everything allocate() returns. A block is
// page-aligned, so most small allocations skip the lookup.
void freeAny(void* p) {
  if ((reinterpret_cast<uintptr_t>(p) & (kPage - 1)) == 0 && pool->give(p)) return;
  beforeRaw(p);
}
// Only for blocks, where the allocator before has no raw deleter.
void freeBlock(void* p) { pool->give(p); }

// clang asks for `override` on all or none; the two torch-dependent members below cannot have it.
#if defined(__clang__)
#pragma clang diagnostic ignored "-Winconsistent-missing-override"
#endif

class SharedCpuAllocator final : public c10::Allocator {
 public:
  // torch 1.x declares allocate() const; later torch 2.x does not, and adds copy_data().
  // Both forms are here, without `override`, so that either torch finds its own.
  c10::DataPtr allocate(size_t bytes) const { return allocateFrom(bytes); }
  c10::DataPtr allocate(size_t bytes) { return allocateFrom(bytes); }
  void copy_data(void* dest, const void* src, std::size_t count) const { std::memcpy(dest, src, count); }

  c10::DeleterFnPtr raw_deleter() const override { return beforeRaw != nullptr ? &freeAny : nullptr; }

 private:
  static c10::DataPtr allocateFrom(size_t bytes) {
    const c10::Device cpu(c10::DeviceType::CPU);
    if (bytes >= kSharedMinBytes && bytes <= kLargestShared) {
      if (void* p = pool->take(sizeClass(bytes))) return {p, p, beforeRaw != nullptr ? &freeAny : &freeBlock, cpu};
    }
    if (beforeRaw == nullptr) return before->allocate(bytes);
    void* p = before->raw_allocate(bytes);
    return {p, p, &freeAny, cpu};
  }
};

// The memory this process may use: the host's, or its cgroup's limit where that is lower
// (cgroup v2 names its group in /proc/self/cgroup; v1's memory controller has its own file).
size_t usableMemory() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long pageBytes = sysconf(_SC_PAGESIZE);
  size_t memory =
      pages > 0 && pageBytes > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(pageBytes) : size_t{4} << 30;
  std::string group;
  std::ifstream cgroups("/proc/self/cgroup");
  for (std::string line; std::getline(cgroups, line);) {
    if (line.rfind("0::", 0) == 0) group = line.substr(3);
  }
  for (const std::string& path : {"/sys/fs/cgroup" + group + "/memory.max", std::string("/sys/fs/cgroup/memory.max"),
                                  std::string("/sys/fs/cgroup/memory/memory.limit_in_bytes")}) {
    std::ifstream file(path);
    unsigned long long limit = 0;
    if (file >> limit && limit > 0 && limit < memory) memory = static_cast<size_t>(limit);  // "max" reads as none
  }
  return memory;
}

// How many ranks share this host, as the launcher says (torchrun and weftrun, Open MPI, MPICH,
// Slurm); 0 where none says.
long localRanksFromLauncher() {
  for (const char* name :
       {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"}) {
    const char* value = std::getenv(name);
    if (value == nullptr) continue;
    const long n = std::strtol(value, nullptr, 10);  // Slurm may write "2(x3)": its leading count
    if (n > 0) return n;
  }
  return 0;
}

// Each block holds a descriptor: a quarter of the soft limit at most, leaving the rest to the
// program (sockets, files, a DataLoader's shared tensors).
size_t maxBlocks() {
  struct rlimit limit {};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 1024;
  return std::max<size_t>(static_cast<size_t>(limit.rlim_cur) / 4, 16);
}

std::atomic<bool> installed{false};

}  // namespace

void installSharedCpuAllocator() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* wanted = std::getenv("WEFT_TORCH_SHARED_MEMORY");
    if (wanted != nullptr && std::strcmp(wanted, "0") == 0) return;
    if (wanted != nullptr && *wanted != '\0' && std::strcmp(wanted, "1") != 0) {
      TORCH_WARN("weft: WEFT_TORCH_SHARED_MEMORY=\"", wanted, "\" is not 0 or 1: large tensors go in shared memory");
    }
    const long localRanks = localRanksFromLauncher();
    if (localRanks == 1) return;  // no peer could read this rank's memory directly
    // Never destroyed: tensors (and allocations in static destructors) may outlive everything else.
    auto* allocator = new SharedCpuAllocator();
    before = c10::GetCPUAllocator();
    beforeRaw = before->raw_deleter();
    // Kept blocks: a quarter of the memory this process may use, over the ranks on its host.
    pool = new BlockPool(usableMemory() / 4 / static_cast<size_t>(std::max(localRanks, 1L)), maxBlocks());
    pthread_atfork([] { pool->beforeFork(); }, [] { pool->afterForkInParent(); }, [] { pool->afterForkInChild(); });
    // Priority 1: above torch's own (0), so a later default registration cannot undo it.
    c10::SetCPUAllocator(allocator, 1);
    installed.store(c10::GetCPUAllocator() == allocator);
  });
}

SharedMemoryStats sharedMemoryStats() {
  if (!installed.load()) return {};
  return pool->stats();
}

size_t releaseSharedMemoryCache() { return installed.load() ? pool->releaseKept() : 0; }

}  // namespace weft_torch
