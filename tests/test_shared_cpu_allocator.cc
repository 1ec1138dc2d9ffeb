// The torch backend's CPU allocator (python/csrc/shared_cpu_allocator.cc) through torch's own
// allocator interface: which tensors get shared memory, torch's raw interface for both kinds,
// the reuse of freed blocks, the cap on blocks (each holds a descriptor), and threads.
#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <sys/resource.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "../python/csrc/shared_cpu_allocator.hpp"
#include "transport/shm/shared_host_memory.h"

using weft_torch::kSharedMinBytes;
using weft_torch::sharedMemoryStats;

namespace {

bool isShared(const void* p, size_t bytes) { return weft::transport::findSharedHostMemory(p, bytes).has_value(); }

// The soft limit on descriptors is set so that the pool takes at most 16 blocks (a quarter).
constexpr size_t kMaxBlocks = 16;

void installWithSmallCap() {
  struct rlimit limit {};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &limit) == 0);
  const rlim_t soft = limit.rlim_cur;
  limit.rlim_cur = kMaxBlocks * 4;
  REQUIRE(setrlimit(RLIMIT_NOFILE, &limit) == 0);
  weft_torch::installSharedCpuAllocator();
  limit.rlim_cur = soft;
  REQUIRE(setrlimit(RLIMIT_NOFILE, &limit) == 0);
}

}  // namespace

TEST_CASE("the shared CPU allocator: large tensors in shared memory, small ones as before", "[torch-allocator]") {
  unsetenv("WEFT_TORCH_SHARED_MEMORY");
  unsetenv("LOCAL_WORLD_SIZE");
  installWithSmallCap();
  REQUIRE(sharedMemoryStats().installed);
  c10::Allocator* allocator = c10::GetCPUAllocator();

  // allocate(): by size.
  {
    c10::DataPtr large = allocator->allocate(kSharedMinBytes);
    c10::DataPtr small = allocator->allocate(kSharedMinBytes - 1);
    CHECK(isShared(large.get(), kSharedMinBytes));
    CHECK_FALSE(isShared(small.get(), 1));
    std::memset(large.get(), 1, kSharedMinBytes);
    std::memset(small.get(), 1, kSharedMinBytes - 1);
    CHECK(sharedMemoryStats().liveBlocks == 1);
  }
  CHECK(sharedMemoryStats().liveBlocks == 0);
  CHECK(sharedMemoryStats().cachedBlocks == 1);

  // torch's raw interface takes both kinds back through the one deleter.
  REQUIRE(allocator->raw_deleter() != nullptr);
  void* rawLarge = allocator->raw_allocate(2 * kSharedMinBytes);
  void* rawSmall = allocator->raw_allocate(64);
  CHECK(isShared(rawLarge, 2 * kSharedMinBytes));
  CHECK_FALSE(isShared(rawSmall, 64));
  allocator->raw_deallocate(rawLarge);
  allocator->raw_deallocate(rawSmall);
  CHECK(sharedMemoryStats().cachedBlocks == 2);

  // A freed block serves the next tensor of its size class (at most an eighth larger), not others.
  {
    at::Tensor a = at::empty({static_cast<int64_t>(kSharedMinBytes / 4 + 1)}, at::kFloat);
    void* at = a.data_ptr();
    a.reset();
    const uint64_t reused = sharedMemoryStats().reused;
    at::Tensor b = at::empty({static_cast<int64_t>(kSharedMinBytes / 4 + 1024)}, at::kFloat);
    CHECK(b.data_ptr() == at);
    CHECK(sharedMemoryStats().reused == reused + 1);
    at::Tensor c = at::ones({static_cast<int64_t>(kSharedMinBytes)}, at::kFloat);
    CHECK(c.data_ptr() != at);
    CHECK(c.sum().item<float>() == static_cast<float>(kSharedMinBytes));
  }

  // At the cap, large tensors get ordinary memory; a kept block of another size makes room.
  const size_t keptBefore = sharedMemoryStats().cachedBlocks;
  std::vector<c10::DataPtr> many;
  for (size_t i = 0; i < kMaxBlocks + 4; ++i) many.push_back(allocator->allocate(4 * kSharedMinBytes));
  size_t shared = 0;
  for (c10::DataPtr& p : many) {
    std::memset(p.get(), 7, 4 * kSharedMinBytes);  // every one is usable memory
    shared += isShared(p.get(), 4 * kSharedMinBytes);
  }
  CHECK(shared == kMaxBlocks);
  CHECK(sharedMemoryStats().fellBack >= 4);
  CHECK(sharedMemoryStats().cachedBlocks == 0);  // the kept ones gave way
  CHECK(keptBefore > 0);
  many.clear();
  CHECK(sharedMemoryStats().liveBlocks == 0);
  CHECK(sharedMemoryStats().cachedBlocks == kMaxBlocks);
  c10::DataPtr other = allocator->allocate(8 * kSharedMinBytes);
  CHECK(isShared(other.get(), 8 * kSharedMinBytes));
  CHECK(sharedMemoryStats().cachedBlocks == kMaxBlocks - 1);
}

TEST_CASE("the shared CPU allocator under threads that allocate and free at once", "[torch-allocator]") {
  unsetenv("WEFT_TORCH_SHARED_MEMORY");
  unsetenv("LOCAL_WORLD_SIZE");
  weft_torch::installSharedCpuAllocator();
  REQUIRE(sharedMemoryStats().installed);
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &failures] {
      std::mt19937 random(t);
      std::vector<at::Tensor> held;
      for (int i = 0; i < 2000; ++i) {
        const int64_t n = std::uniform_int_distribution<int64_t>(1, 4 * kSharedMinBytes / 4)(random);
        held.push_back(at::full({n}, static_cast<float>(t)));
        if (held.size() > 8) {
          const size_t victim = random() % held.size();
          if (held[victim].max().item<float>() != static_cast<float>(t)) ++failures[t];
          held.erase(held.begin() + static_cast<std::ptrdiff_t>(victim));
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int f : failures) CHECK(f == 0);
  CHECK(sharedMemoryStats().liveBlocks == 0);
}

// Run by ctest with LOCAL_WORLD_SIZE=1 (a rank alone on its host) or WEFT_TORCH_SHARED_MEMORY=0.
TEST_CASE("the shared CPU allocator stays out where it is not wanted", "[.torch-allocator-off]") {
  weft_torch::installSharedCpuAllocator();
  CHECK_FALSE(sharedMemoryStats().installed);
  c10::DataPtr large = c10::GetCPUAllocator()->allocate(4 * kSharedMinBytes);
  CHECK_FALSE(isShared(large.get(), 4 * kSharedMinBytes));
}

// Run by ctest with WEFT_TORCH_SHARED_MEMORY=yes: a warning, and the allocator as by default.
TEST_CASE("the shared CPU allocator takes a value other than 0 or 1 as on", "[.torch-allocator-bad-value]") {
  unsetenv("LOCAL_WORLD_SIZE");
  weft_torch::installSharedCpuAllocator();
  CHECK(sharedMemoryStats().installed);
}
