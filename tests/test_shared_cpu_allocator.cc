// The torch backend's CPU allocator (python/csrc/shared_cpu_allocator.cc, shared_block_pool.cc)
// through torch's own allocator interface: which tensors get shared memory, torch's raw
// interface for both kinds, the reuse of freed blocks and its caps, fork, and threads.
//
// Installing is once per process, and ctest runs each case in a process of its own; every case
// installs alike (installForTest), so that the cases can also run one after another.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/CPUAllocator.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "../python/csrc/shared_cpu_allocator.hpp"
#include "multiprocess.h"
#include "transport/shm/shared_host_memory.h"

using weft_torch::kSharedMinBytes;
using weft_torch::sharedMemoryStats;
using weft::test::inForkedChild;

namespace {

constexpr size_t kMiB = size_t{1} << 20;

bool isShared(const void* p, size_t bytes) { return weft::transport::findSharedHostMemory(p, bytes).has_value(); }

// Which memfd a block is (an address may come back for another block once one is unmapped).
uint64_t inodeOf(const void* p) {
  auto range = weft::transport::findSharedHostMemory(p, 1);
  return range ? range->inode : 0;
}

// With the soft limit on descriptors at 64 while it installs, the pool holds at most 16 blocks.
constexpr size_t kMaxBlocks = 16;

void installForTest() {
  at::set_num_threads(1);  // the fork cases: no intra-op threads for a child to inherit half of
  unsetenv("WEFT_TORCH_SHARED_MEMORY");
  unsetenv("LOCAL_WORLD_SIZE");
  struct rlimit limit {};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &limit) == 0);
  const rlim_t soft = limit.rlim_cur;
  limit.rlim_cur = kMaxBlocks * 4;
  REQUIRE(setrlimit(RLIMIT_NOFILE, &limit) == 0);
  weft_torch::installSharedCpuAllocator();
  limit.rlim_cur = soft;
  REQUIRE(setrlimit(RLIMIT_NOFILE, &limit) == 0);
  REQUIRE(sharedMemoryStats().installed);
  weft_torch::releaseSharedMemoryCache();  // what an earlier case kept
}

}  // namespace

TEST_CASE("the shared CPU allocator: large tensors in shared memory, small ones as before", "[torch-allocator]") {
  installForTest();
  c10::Allocator* allocator = c10::GetCPUAllocator();
  {
    c10::DataPtr large = allocator->allocate(kSharedMinBytes);
    c10::DataPtr small = allocator->allocate(kSharedMinBytes - 1);
    c10::DataPtr empty = allocator->allocate(0);
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
  const uint64_t reused = sharedMemoryStats().reused;
  void* rawLarge = allocator->raw_allocate(kSharedMinBytes);
  void* rawSmall = allocator->raw_allocate(64);
  CHECK(isShared(rawLarge, kSharedMinBytes));
  CHECK_FALSE(isShared(rawSmall, 64));
  CHECK(sharedMemoryStats().reused == reused + 1);  // the block freed above
  allocator->raw_deallocate(rawLarge);
  allocator->raw_deallocate(rawSmall);
  allocator->raw_deallocate(nullptr);
  CHECK(sharedMemoryStats().cachedBlocks == 1);
}

TEST_CASE("the shared CPU allocator reuses a freed block for its size class, keeping no more than was in use",
          "[torch-allocator]") {
  installForTest();
  const auto floats = [](size_t bytes) { return static_cast<int64_t>(bytes / sizeof(float)); };
  at::Tensor a = at::empty({floats(kSharedMinBytes) + 1});
  void* at = a.data_ptr();
  a.reset();
  at::Tensor b = at::empty({floats(kSharedMinBytes) + 1024});  // within an eighth: the same class
  CHECK(b.data_ptr() == at);
  at::Tensor c = at::ones({floats(2 * kSharedMinBytes)});
  CHECK(c.data_ptr() != at);
  CHECK(c.sum().item<float>() == static_cast<float>(floats(2 * kSharedMinBytes)));
  b.reset();
  c.reset();
  const weft_torch::SharedMemoryStats kept = sharedMemoryStats();
  CHECK(kept.cachedBlocks == 2);
  CHECK(kept.cachedBytes <= kept.peakLiveBytes);
  // A 4 MiB tensor, freed, would keep more than was ever in use at once: it is given back.
  at::Tensor big = at::empty({floats(4 * kMiB)});
  const size_t peak = sharedMemoryStats().peakLiveBytes;
  big.reset();
  CHECK(sharedMemoryStats().cachedBytes <= peak);
  CHECK(sharedMemoryStats().cachedBlocks == 2);
  // Everything kept goes back on request.
  CHECK(weft_torch::releaseSharedMemoryCache() == kept.cachedBytes);
  CHECK(sharedMemoryStats().cachedBlocks == 0);
  CHECK(sharedMemoryStats().cachedBytes == 0);
}

TEST_CASE("at the cap on blocks, large tensors get ordinary memory, and a kept block makes room",
          "[torch-allocator]") {
  installForTest();
  c10::Allocator* allocator = c10::GetCPUAllocator();
  std::vector<c10::DataPtr> many;
  for (size_t i = 0; i < kMaxBlocks; ++i) many.push_back(allocator->allocate(kMiB));
  many.clear();
  REQUIRE(sharedMemoryStats().cachedBlocks == kMaxBlocks);
  const uint64_t fellBack = sharedMemoryStats().fellBack;
  for (size_t i = 0; i < kMaxBlocks + 4; ++i) many.push_back(allocator->allocate(kMiB));
  size_t shared = 0;
  for (c10::DataPtr& p : many) {
    std::memset(p.get(), 7, kMiB);  // every one is usable memory
    shared += isShared(p.get(), kMiB);
  }
  CHECK(shared == kMaxBlocks);
  CHECK(sharedMemoryStats().fellBack == fellBack + 4);
  many.clear();
  CHECK(sharedMemoryStats().cachedBlocks == kMaxBlocks);
  c10::DataPtr other = allocator->allocate(2 * kMiB);  // another class: a kept block gives way
  CHECK(isShared(other.get(), 2 * kMiB));
  CHECK(sharedMemoryStats().cachedBlocks == kMaxBlocks - 1);
}

TEST_CASE("after a fork, neither side gives a new tensor a block that was there at the fork", "[torch-allocator]") {
  installForTest();
  at::Tensor live = at::full({static_cast<int64_t>(kMiB / 4)}, 1.0f);
  at::Tensor freed = at::empty({static_cast<int64_t>(kMiB / 4)});
  void* keptAt = freed.data_ptr();
  const uint64_t keptInode = inodeOf(keptAt);
  const uint64_t liveInode = inodeOf(live.data_ptr());
  freed.reset();
  REQUIRE(sharedMemoryStats().cachedBlocks == 1);
  const int child = inForkedChild([&] {
    // The child's copies of both blocks show what its parent writes to them later: a new
    // tensor of the child's must be in neither.
    at::Tensor mine = at::empty({static_cast<int64_t>(kMiB / 4)});
    if (!isShared(mine.data_ptr(), kMiB)) return 2;  // a new block, its own, for its own peers
    if (inodeOf(mine.data_ptr()) == keptInode || inodeOf(mine.data_ptr()) == liveInode) return 3;
    if (sharedMemoryStats().cachedBlocks != 0) return 4;
    live.fill_(2.0f);  // its own copy
    return live.max().item<float>() == 2.0f ? 0 : 5;
  });
  CHECK(child == 0);
  CHECK(live.max().item<float>() == 1.0f);
  // The parent may reuse the block that was kept at the fork (no tensor of the child's is in
  // it), but not the one in use then, which the child may still read.
  at::Tensor again = at::empty({static_cast<int64_t>(kMiB / 4)});
  CHECK(again.data_ptr() == keptAt);
  live.reset();
  CHECK(sharedMemoryStats().cachedBlocks == 0);
  at::Tensor next = at::empty({static_cast<int64_t>(kMiB / 4)});
  CHECK(inodeOf(next.data_ptr()) != liveInode);
}

TEST_CASE("a fork while other threads allocate leaves the child able to allocate", "[torch-allocator]") {
  // Without the pool's fork handlers, a child forked while another thread held its lock would
  // wait for it at its first allocation, until the alarm.
  installForTest();
  std::atomic<bool> stop{false};
  std::thread churn([&] {
    while (!stop.load()) at::empty({static_cast<int64_t>(kSharedMinBytes)}).fill_(1.0f);
  });
  for (int i = 0; i < 200; ++i) {
    const int child =
        inForkedChild([] { return at::ones({static_cast<int64_t>(kMiB)}).sum().item<float>() > 0 ? 0 : 2; });
    CHECK(child == 0);
    if (child != 0) break;
  }
  stop = true;
  churn.join();
}

TEST_CASE("the shared CPU allocator under threads that allocate and free at once", "[torch-allocator]") {
  installForTest();
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &failures] {
      std::mt19937 random(t);
      std::vector<at::Tensor> held;
      for (int i = 0; i < 2000; ++i) {
        const int64_t n = std::uniform_int_distribution<int64_t>(1, kMiB / 4)(random);
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
  const weft_torch::SharedMemoryStats s = sharedMemoryStats();
  CHECK(s.liveBlocks == 0);
  CHECK(s.cachedBytes <= s.peakLiveBytes);
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

namespace {

// An allocator without torch's raw interface, installed before Weft's.
void freeBoxed(void* context) { delete[] static_cast<char*>(context); }
struct NoRawAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t bytes) const override {
    char* p = new char[bytes + 64];
    return {p + 64, p, &freeBoxed, c10::Device(c10::DeviceType::CPU)};  // data != context
  }
};

}  // namespace

// Run by ctest on its own: the allocator before Weft's has no raw deleter, so Weft's has none.
TEST_CASE("over an allocator without a raw interface, the shared CPU allocator has none either",
          "[.torch-allocator-no-raw]") {
  unsetenv("WEFT_TORCH_SHARED_MEMORY");
  unsetenv("LOCAL_WORLD_SIZE");
  static NoRawAllocator noRaw;
  c10::SetCPUAllocator(&noRaw, 0);
  weft_torch::installSharedCpuAllocator();
  REQUIRE(sharedMemoryStats().installed);
  c10::Allocator* allocator = c10::GetCPUAllocator();
  CHECK(allocator->raw_deleter() == nullptr);
  {
    c10::DataPtr large = allocator->allocate(kMiB);
    c10::DataPtr small = allocator->allocate(100);
    CHECK(isShared(large.get(), kMiB));
    CHECK(small.get_deleter() == &freeBoxed);
    std::memset(small.get(), 3, 100);
  }
  CHECK(sharedMemoryStats().cachedBlocks == 1);
}
