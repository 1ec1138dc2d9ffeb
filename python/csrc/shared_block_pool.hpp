// The shared CPU allocator's blocks (shared_cpu_allocator.hpp): memory from weftHostMemAlloc,
// those tensors hold and those freed and kept for reuse by size class.
//
// Kept blocks are capped by bytes (at most the most this process has had in use at once, and
// the cap it is given) and, with the live ones, by count: each block is a memfd and so holds a
// descriptor. Past the count, take() gives nothing (the tensor gets ordinary memory) unless a
// kept block of another size can make room.
//
// No block that was there at a fork is used for a new tensor again, in the parent or the child:
// weftHostMemAlloc's fork rule lets a child see its parent's later writes to pages the child
// has not written, so a child still reading a tensor must not find another tensor's data in
// it, nor a new tensor of the child's what its parent writes. Such a block, once free, is
// released; the child releases the kept ones it inherited at its next call.
//
// The lock is never held across a call into Weft, and is held across fork, so that a child
// finds the pool whole.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "shared_cpu_allocator.hpp"

namespace weft_torch {

class BlockPool {
 public:
  BlockPool(size_t cacheCapBytes, size_t maxBlocks) : cacheCap_(cacheCapBytes), maxBlocks_(maxBlocks) {}
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // A block of `classBytes` (a kept one, else a new one), or nullptr where shared memory is not
  // to be had.
  void* take(size_t classBytes);
  // Takes back a block no tensor uses any more; false where `p` is not one. Never throws: it
  // runs in torch's deleters.
  bool give(void* p) noexcept;
  // Releases every kept block; returns their bytes.
  size_t releaseKept();
  SharedMemoryStats stats();

  // pthread_atfork's three: the lock is held across fork, and both sides count the fork.
  void beforeFork() { mutex_.lock(); }
  void afterForkInParent();
  void afterForkInChild();

 private:
  struct Live {
    size_t bytes;    // its size class
    uint64_t forks;  // forks_ when it was taken: a fork since, and a child may still read it
  };

  void addLiveLocked(void* p, size_t bytes);  // may throw (std::bad_alloc)
  void* evictOneLocked();                     // a kept block, the largest, to free outside the lock
  void releaseInherited();                    // frees what a fork left in inherited_

  std::mutex mutex_;
  std::unordered_map<void*, Live> live_;
  std::unordered_map<size_t, std::vector<void*>> kept_;  // size class -> freed blocks
  std::vector<void*> inherited_;                         // kept blocks a fork made unusable
  SharedMemoryStats counts_{.installed = true};
  size_t creating_ = 0;  // being allocated, outside the lock
  uint64_t forks_ = 0;
  const size_t cacheCap_;
  const size_t maxBlocks_;
};

}  // namespace weft_torch
