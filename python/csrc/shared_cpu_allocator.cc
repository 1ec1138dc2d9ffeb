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
#include <mutex>
#include <unordered_map>
#include <vector>

#include "weft/weft.h"

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

// The blocks from weftHostMemAlloc: those tensors hold, and those freed and kept for reuse.
// Its lock is never held across a call into Weft, and is held across fork (so that a child,
// whose copies of the blocks are its own, finds it consistent).
class BlockPool {
 public:
  BlockPool(size_t cacheCapBytes, size_t maxBlocks) : cacheCap_(cacheCapBytes), maxBlocks_(maxBlocks) {}

  // A block of `classBytes`, or nullptr where shared memory is not to be had (then: ordinary memory).
  void* take(size_t classBytes) {
    void* evicted = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = cached_.find(classBytes);
      if (it != cached_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        counts_.cachedBytes -= classBytes;
        --counts_.cachedBlocks;
        addLiveLocked(p, classBytes);
        ++counts_.reused;
        return p;
      }
      if (live_.size() + counts_.cachedBlocks + creating_ >= maxBlocks_) {
        // Every block holds a descriptor: at the cap, a kept block of another size makes room.
        if (counts_.cachedBlocks == 0) {
          ++counts_.fellBack;
          return nullptr;
        }
        evicted = evictOneLocked();
      }
      ++creating_;
    }
    if (evicted != nullptr) weftHostMemFree(evicted);
    void* p = nullptr;
    const weftResult_t rc = weftHostMemAlloc(&p, classBytes);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      --creating_;
      if (rc == weftSuccess) {
        addLiveLocked(p, classBytes);
        return p;
      }
      ++counts_.fellBack;
    }
    TORCH_WARN_ONCE("weft: a tensor of ", classBytes, " bytes got ordinary memory, not shared memory (",
                    weftGetLastError(nullptr), "): all-reduces of such tensors copy through shared-memory segments");
    return nullptr;
  }

  // Takes back a block tensors no longer use; false where `p` is not one.
  bool give(void* p) {
    bool kept = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = live_.find(p);
      if (it == live_.end()) return false;
      const size_t bytes = it->second;
      live_.erase(it);
      counts_.liveBlocks = live_.size();
      counts_.liveBytes -= bytes;
      if (counts_.cachedBytes + bytes <= cacheCap_) {
        cached_[bytes].push_back(p);
        counts_.cachedBytes += bytes;
        ++counts_.cachedBlocks;
        kept = true;
      }
    }
    if (!kept) weftHostMemFree(p);
    return true;
  }

  SharedMemoryStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return counts_;
  }

  void lockForFork() { mutex_.lock(); }
  void unlockAfterFork() { mutex_.unlock(); }

 private:
  // A kept block, the largest, to free outside the lock.
  void* evictOneLocked() {
    auto largest = cached_.end();
    for (auto it = cached_.begin(); it != cached_.end(); ++it) {
      if (!it->second.empty() && (largest == cached_.end() || it->first > largest->first)) largest = it;
    }
    void* p = largest->second.back();
    largest->second.pop_back();
    counts_.cachedBytes -= largest->first;
    --counts_.cachedBlocks;
    return p;
  }

  void addLiveLocked(void* p, size_t classBytes) {
    live_.emplace(p, classBytes);
    counts_.liveBlocks = live_.size();
    counts_.liveBytes += classBytes;
  }

  std::mutex mutex_;
  std::unordered_map<void*, size_t> live_;                 // block -> its size class
  std::unordered_map<size_t, std::vector<void*>> cached_;  // size class -> freed blocks
  SharedMemoryStats counts_{.installed = true};
  size_t creating_ = 0;  // being allocated, outside the lock
  const size_t cacheCap_;
  const size_t maxBlocks_;
};

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

// Blocks held by this process's own ranks: a quarter of the host's memory over the ranks that
// share it, past which freed blocks go back to the system.
size_t cacheCapBytes(size_t localRanks) {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long pageBytes = sysconf(_SC_PAGESIZE);
  const size_t memory = pages > 0 && pageBytes > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(pageBytes)
                                                   : size_t{4} << 30;
  return memory / 4 / std::max<size_t>(localRanks, 1);
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
    const char* local = std::getenv("LOCAL_WORLD_SIZE");
    const long localRanks = local != nullptr ? std::strtol(local, nullptr, 10) : 0;
    if (localRanks == 1) return;
    // Never destroyed: tensors (and allocations in static destructors) may outlive everything else.
    auto* allocator = new SharedCpuAllocator();
    before = c10::GetCPUAllocator();
    beforeRaw = before->raw_deleter();
    pool = new BlockPool(cacheCapBytes(localRanks > 0 ? static_cast<size_t>(localRanks) : 1), maxBlocks());
    pthread_atfork([] { pool->lockForFork(); }, [] { pool->unlockAfterFork(); }, [] { pool->unlockAfterFork(); });
    // Priority 1: above torch's own (0), so a later default registration cannot undo it.
    c10::SetCPUAllocator(allocator, 1);
    installed.store(c10::GetCPUAllocator() == allocator);
  });
}

SharedMemoryStats sharedMemoryStats() {
  if (!installed.load()) return {};
  return pool->stats();
}

}  // namespace weft_torch
