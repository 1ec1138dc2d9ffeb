#include "shared_block_pool.hpp"

#include <c10/util/Exception.h>

#include <algorithm>
#include <new>

#include "weft/weft.h"

namespace weft_torch {

void* BlockPool::take(size_t classBytes) {
  releaseInherited();
  void* evicted = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = kept_.find(classBytes);
    if (it != kept_.end() && !it->second.empty()) {
      void* p = it->second.back();
      addLiveLocked(p, classBytes);  // first: a throw leaves the block kept
      it->second.pop_back();
      counts_.cachedBytes -= classBytes;
      --counts_.cachedBlocks;
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
      try {
        addLiveLocked(p, classBytes);
        return p;
      } catch (const std::bad_alloc&) {
      }
    }
    ++counts_.fellBack;
  }
  if (rc == weftSuccess) {
    weftHostMemFree(p);  // not tracked, so not to be handed out
    return nullptr;
  }
  TORCH_WARN_ONCE("weft: a tensor of ", classBytes, " bytes got ordinary memory, not shared memory (",
                  weftGetLastError(nullptr), "): all-reduces of such tensors copy through shared-memory segments");
  return nullptr;
}

bool BlockPool::give(void* p) noexcept {
  bool kept = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(p);
    if (it == live_.end()) return false;
    const Live block = it->second;
    live_.erase(it);
    counts_.liveBytes -= block.bytes;
    const size_t cap = std::min(cacheCap_, counts_.peakLiveBytes);
    if (block.forks == forks_ && counts_.cachedBytes + block.bytes <= cap) {
      try {
        kept_[block.bytes].push_back(p);
        counts_.cachedBytes += block.bytes;
        ++counts_.cachedBlocks;
        kept = true;
      } catch (const std::bad_alloc&) {
      }
    }
  }
  if (!kept) weftHostMemFree(p);
  return true;
}

size_t BlockPool::releaseKept() {
  std::vector<void*> blocks;
  size_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [size, list] : kept_) {
      bytes += size * list.size();
      blocks.insert(blocks.end(), list.begin(), list.end());
    }
    kept_.clear();
    counts_.cachedBytes = 0;
    counts_.cachedBlocks = 0;
  }
  for (void* p : blocks) weftHostMemFree(p);
  releaseInherited();
  return bytes;
}

SharedMemoryStats BlockPool::stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  SharedMemoryStats s = counts_;
  s.liveBlocks = live_.size();
  return s;
}

void BlockPool::afterForkInParent() {
  ++forks_;
  mutex_.unlock();
}

// glibc's malloc is usable here: it makes its own locks whole again in the child. Nothing may
// throw out of a fork handler: blocks that find no room in inherited_ stay mapped, unused.
void BlockPool::afterForkInChild() {
  ++forks_;
  try {
    for (auto& [size, list] : kept_) inherited_.insert(inherited_.end(), list.begin(), list.end());
  } catch (const std::bad_alloc&) {
  }
  kept_.clear();
  counts_.cachedBytes = 0;
  counts_.cachedBlocks = 0;
  mutex_.unlock();
}

void BlockPool::addLiveLocked(void* p, size_t bytes) {
  live_.emplace(p, Live{bytes, forks_});
  counts_.liveBytes += bytes;
  counts_.peakLiveBytes = std::max(counts_.peakLiveBytes, counts_.liveBytes);
}

void* BlockPool::evictOneLocked() {
  auto largest = kept_.end();
  for (auto it = kept_.begin(); it != kept_.end(); ++it) {
    if (!it->second.empty() && (largest == kept_.end() || it->first > largest->first)) largest = it;
  }
  void* p = largest->second.back();
  largest->second.pop_back();
  counts_.cachedBytes -= largest->first;
  --counts_.cachedBlocks;
  return p;
}

void BlockPool::releaseInherited() {
  std::vector<void*> blocks;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (inherited_.empty()) return;
    blocks.swap(inherited_);
  }
  for (void* p : blocks) weftHostMemFree(p);
}

}  // namespace weft_torch
