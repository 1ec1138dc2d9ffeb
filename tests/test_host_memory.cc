// weftHostMemAlloc buffers: large all-reduces among the ranks of one host read
// each other's buffers directly (coll/direct_allreduce.h). Ranks are real
// processes; the path taken is read from each rank's WEFT_DEBUG=INFO log.
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "coll/direct_allreduce.h"
#include "multiprocess.h"
#include "transport/shm/shared_host_memory.h"

using namespace weft::test;

namespace {

constexpr const char* kDirect = "read the peers' buffers directly";
constexpr const char* kCopying = "took the copying path";

// The parent never logs (its log level would be fixed before the ranks set
// theirs), so it sets WEFT_DEBUG for the ranks it forks and clears it after.
struct InfoLog {
  InfoLog() { setenv("WEFT_DEBUG", "INFO", 1); }
  ~InfoLog() { unsetenv("WEFT_DEBUG"); }
};

// Distinct per rank and element, none the sum of others (which once hid an
// in-place bug).
float inputOf(int rank, size_t i) { return static_cast<float>((rank * rank + 1) * static_cast<int>(i % 11 + rank)); }

// Runs float all-reduces (sum, max, avg) of `count` elements at `offset` bytes
// into weftHostMemAlloc'd buffers (or malloc'd ones on ranks where `shared`
// says not), out of place and in place, checking every element.
int allReduceChecked(RankContext& ctx, size_t count, size_t offset, bool shared) {
  weftComm_t comm = rankComm(ctx);
  if (comm == nullptr) return 1;
  const size_t bytes = offset + count * sizeof(float);
  void* sendBase = nullptr;
  void* recvBase = nullptr;
  if (shared) {
    RANK_WEFT(ctx, weftHostMemAlloc(&sendBase, bytes));
    RANK_WEFT(ctx, weftHostMemAlloc(&recvBase, bytes));
  } else {
    sendBase = std::malloc(bytes);
    recvBase = std::malloc(bytes);
  }
  if (sendBase == nullptr || recvBase == nullptr) return 1;
  auto* send = reinterpret_cast<float*>(static_cast<char*>(sendBase) + offset);
  auto* recv = reinterpret_cast<float*>(static_cast<char*>(recvBase) + offset);
  const int n = ctx.nranks;
  for (weftRedOp_t op : {weftSum, weftMax, weftAvg}) {
    for (bool inPlace : {false, true}) {
      for (size_t i = 0; i < count; ++i) send[i] = inputOf(ctx.rank, i);
      float* out = inPlace ? send : recv;
      RANK_WEFT(ctx, weftAllReduce(send, out, count, weftFloat32, op, comm, nullptr));
      size_t wrong = 0;
      for (size_t i = 0; i < count; ++i) {
        float want = 0;
        for (int r = 0; r < n; ++r) want = op == weftMax ? std::max(want, inputOf(r, i)) : want + inputOf(r, i);
        if (op == weftAvg) want /= static_cast<float>(n);
        wrong += out[i] != want ? 1 : 0;
      }
      RANK_CHECK(ctx, wrong == 0, "op %d, in place %d: %zu of %zu elements wrong", static_cast<int>(op), inPlace, wrong,
                 count);
    }
  }
  RANK_WEFT(ctx, weftCommDestroy(comm));
  if (shared) {
    RANK_WEFT(ctx, weftHostMemFree(sendBase));
    RANK_WEFT(ctx, weftHostMemFree(recvBase));
  } else {
    std::free(sendBase);
    std::free(recvBase);
  }
  return 0;
}

}  // namespace

TEST_CASE("weftHostMemAlloc and weftHostMemFree refuse bad arguments with a reason", "[host-memory]") {
  auto outcomes = runRanks(1, [](RankContext& ctx) {
    void* p = nullptr;
    RANK_CHECK(ctx, weftHostMemAlloc(nullptr, 64) == weftInvalidArgument, "NULL ptr accepted");
    RANK_CHECK(ctx, contains(weftGetLastError(nullptr), "ptr is NULL"), "%s", weftGetLastError(nullptr));
    RANK_CHECK(ctx, weftHostMemAlloc(&p, 0) == weftInvalidArgument, "size 0 accepted");
    RANK_CHECK(ctx, contains(weftGetLastError(nullptr), "size is 0"), "%s", weftGetLastError(nullptr));
    RANK_CHECK(ctx, weftHostMemAlloc(&p, SIZE_MAX / 2) == weftSystemError, "an impossible size accepted");
    RANK_CHECK(ctx, contains(weftGetLastError(nullptr), "more than this host's memory"), "%s",
               weftGetLastError(nullptr));
    RANK_WEFT(ctx, weftHostMemAlloc(&p, 100));
    RANK_CHECK(ctx, reinterpret_cast<uintptr_t>(p) % 4096 == 0, "%p is not page-aligned", p);
    std::memset(p, 7, 100);
    int local = 0;
    RANK_CHECK(ctx, weftHostMemFree(&local) == weftInvalidArgument, "a stack address freed");
    RANK_CHECK(ctx, contains(weftGetLastError(nullptr), "not the start of a live allocation"), "%s",
               weftGetLastError(nullptr));
    RANK_CHECK(ctx, weftHostMemFree(static_cast<char*>(p) + 8) == weftInvalidArgument, "an inner pointer freed");
    RANK_WEFT(ctx, weftHostMemFree(p));
    RANK_CHECK(ctx, weftHostMemFree(p) == weftInvalidArgument, "a double free accepted");
    RANK_WEFT(ctx, weftHostMemFree(nullptr));
    return 0;
  });
  expectAllPassed(outcomes);
}

TEST_CASE("a peer's allocation maps only as its owner described it", "[host-memory]") {
  auto outcomes = runRanks(1, [](RankContext& ctx) {
    void* p = nullptr;
    RANK_WEFT(ctx, weftHostMemAlloc(&p, 8192));
    std::memset(p, 0x5a, 8192);
    auto range = weft::transport::findSharedHostMemory(static_cast<char*>(p) + 4096, 4096);
    RANK_CHECK(ctx, range.has_value() && range->offset == 4096, "the range was not found");
    RANK_CHECK(ctx, !weft::transport::findSharedHostMemory(static_cast<char*>(p) + 4096, 4097), "a range past the end");
    if (!range) return 1;
    weft::transport::PeerAllocations peers;
    auto at = peers.map(*range, 4096);  // this process stands in for the peer
    RANK_CHECK(ctx, at.isOk() && at.value()[0] == 0x5a && at.value()[4095] == 0x5a, "%s",
               at.status().message().c_str());
    auto beyond = peers.map(*range, 4097);
    RANK_CHECK(ctx, !beyond.isOk() && contains(beyond.status().message().c_str(), "outside its allocation"), "%s",
               beyond.status().message().c_str());
    auto other = *range;
    other.id += 1000;  // not cached: it is opened, and its file is not the one named
    other.inode += 1;
    auto wrong = peers.map(other, 16);
    RANK_CHECK(ctx, !wrong.isOk() && contains(wrong.status().message().c_str(), "not the allocation its owner named"),
               "%s", wrong.status().message().c_str());
    other = *range;
    other.id += 1000;
    other.fd = 9999;
    auto closed = peers.map(other, 16);
    RANK_CHECK(ctx, !closed.isOk() && contains(closed.status().message().c_str(), "/fd/9999"), "%s",
               closed.status().message().c_str());
    RANK_WEFT(ctx, weftHostMemFree(p));
    return 0;
  });
  expectAllPassed(outcomes);
}

TEST_CASE("a call's mappings of peer allocations stay until trimmed, however many", "[host-memory]") {
  // A call on many ranks maps more peer buffers than the cache keeps: none may be unmapped
  // while the call still reads it (once, 2 x 33 peers' buffers unmapped the first of them).
  auto outcomes = runRanks(1, [](RankContext& ctx) {
    constexpr size_t kAllocations = weft::transport::PeerAllocations::kMaxMappings + 6;
    std::vector<void*> owned(kAllocations);
    std::vector<const char*> mapped;
    weft::transport::PeerAllocations peers;
    for (size_t i = 0; i < kAllocations; ++i) {
      RANK_WEFT(ctx, weftHostMemAlloc(&owned[i], 4096));
      std::memset(owned[i], static_cast<int>(i), 4096);
      auto range = weft::transport::findSharedHostMemory(owned[i], 4096);
      auto at = range ? peers.map(*range, 4096) : weft::Result<char*>(weft::Status(weftInternalError, "none"));
      RANK_CHECK(ctx, at.isOk(), "allocation %zu: %s", i, at.status().message().c_str());
      if (!at.isOk()) return 1;
      mapped.push_back(at.value());
    }
    unsigned char resident = 0;
    auto isMapped = [&](const char* p) { return mincore(const_cast<char*>(p), 4096, &resident) == 0; };
    for (size_t i = 0; i < kAllocations; ++i) {
      RANK_CHECK(ctx, isMapped(mapped[i]) && mapped[i][4095] == static_cast<char>(i), "mapping %zu lost", i);
    }
    peers.trim();
    for (size_t i = 0; i < kAllocations; ++i) {
      const bool oldest = i < kAllocations - weft::transport::PeerAllocations::kMaxMappings;
      RANK_CHECK(ctx, isMapped(mapped[i]) != oldest, "mapping %zu: mapped %d after trim", i, isMapped(mapped[i]));
    }
    for (void* p : owned) RANK_WEFT(ctx, weftHostMemFree(p));
    return 0;
  });
  expectAllPassed(outcomes);
}

TEST_CASE("a child made by fork writes its own copy of an allocation, not its parent's", "[host-memory]") {
  auto outcomes = runRanks(1, [](RankContext& ctx) {
    constexpr size_t kBytes = 3 * 4096;
    void* p = nullptr;
    RANK_WEFT(ctx, weftHostMemAlloc(&p, kBytes));
    auto* bytes = static_cast<unsigned char*>(p);
    std::memset(bytes, 0x11, kBytes);
    const int child = inForkedChild([&] {
      // The child sees its parent's bytes, writes its own, and its copy is not for peers.
      if (bytes[0] != 0x11 || bytes[kBytes - 1] != 0x11) return 2;
      std::memset(bytes + 4096, 0x22, 4096);
      if (bytes[4096] != 0x22 || bytes[0] != 0x11) return 3;
      if (weft::transport::findSharedHostMemory(bytes, kBytes)) return 4;
      if (weftHostMemFree(p) != weftSuccess) return 5;
      return 0;
    });
    RANK_CHECK(ctx, child == 0, "the child failed with status %d", child);
    RANK_CHECK(ctx, std::all_of(bytes, bytes + kBytes, [](unsigned char b) { return b == 0x11; }),
               "the child's write reached the parent");
    RANK_CHECK(ctx, weft::transport::findSharedHostMemory(bytes, kBytes).has_value(),
               "the parent's allocation is no longer shared");
    RANK_WEFT(ctx, weftHostMemFree(p));
    return 0;
  });
  expectAllPassed(outcomes);
}

TEST_CASE("a fork while another thread allocates leaves the child able to allocate", "[host-memory]") {
  // Without the fork handlers, a child forked while another thread held the registry's lock
  // would wait for it forever at its first allocation.
  auto outcomes = runRanks(1, [](RankContext& ctx) {
    std::atomic<bool> stop{false};
    std::thread churn([&] {
      while (!stop.load()) {
        void* q = nullptr;
        if (weftHostMemAlloc(&q, 4096) == weftSuccess) weftHostMemFree(q);
      }
    });
    for (int i = 0; i < 300; ++i) {
      const int child = inForkedChild([] {
        void* q = nullptr;
        return weftHostMemAlloc(&q, 4096) == weftSuccess && weftHostMemFree(q) == weftSuccess ? 0 : 2;
      });
      RANK_CHECK(ctx, child == 0, "fork %d: the child ended with status %d", i, child);
      if (child != 0) break;
    }
    stop = true;
    churn.join();
    return 0;
  });
  expectAllPassed(outcomes);
}

TEST_CASE("all-reduces on weftHostMemAlloc buffers read the peers' buffers directly", "[host-memory][multiprocess]") {
  InfoLog info;
  for (int nranks : {2, 3}) {
    // At the threshold, and an odd count that splits unevenly, at an odd offset
    // into the allocation.
    constexpr size_t kAtThreshold = weft::coll::kDirectMinBytes / sizeof(float);
    for (auto [count, offset] : {std::pair<size_t, size_t>{kAtThreshold, 0}, {kAtThreshold + 12347, 52}}) {
      CAPTURE(nranks, count, offset);
      auto outcomes =
          runRanks(nranks, [count, offset](RankContext& ctx) { return allReduceChecked(ctx, count, offset, true); });
      expectAllPassed(outcomes);
      for (const RankOutcome& o : outcomes) {
        CHECK(contains(o.output.c_str(), kDirect));
        CHECK_FALSE(contains(o.output.c_str(), kCopying));
      }
    }
  }
}

TEST_CASE("the direct all-reduce streams its output once a rank's block of them outgrows its L2",
          "[host-memory][multiprocess]") {
  // laptop.xml: 8 CPUs, 8 MiB of L3 and 256 KiB of L2 a core, so 2 ranks stream from 256 KiB,
  // where the ring's switch (half a rank's L3 share) is 512 KiB. Between the two, at an odd
  // offset, the sums must come out right out of place and in place alike.
  const std::string topology = std::string(WEFT_TOPO_FIXTURES) + "/laptop.xml";
  setenv("WEFT_TOPO_FILE", topology.c_str(), 1);
  InfoLog info;
  constexpr size_t kCount = (size_t{300} << 10) / sizeof(float) + 12347;
  auto outcomes = runRanks(2, [](RankContext& ctx) { return allReduceChecked(ctx, kCount, 52, true); });
  unsetenv("WEFT_TOPO_FILE");
  expectAllPassed(outcomes);
  for (const RankOutcome& o : outcomes) {
    CHECK(contains(o.output.c_str(), "directly (out of place from 262144 bytes with streaming stores)"));
  }
  CHECK(weft::coll::directStreamingMinBytes(16 << 20, false, 1 << 20, 1.0) == size_t{1} << 20);
  CHECK(weft::coll::directStreamingMinBytes(16 << 20, false, 1 << 20, 2.0) == size_t{512} << 10);  // a shared core
  CHECK(weft::coll::directStreamingMinBytes(512 << 10, false, 2 << 20, 1.0) == size_t{512} << 10);  // never later
  CHECK(weft::coll::directStreamingMinBytes(16 << 20, true, 1 << 20, 1.0) == size_t{16} << 20);  // as the user set it
  CHECK(weft::coll::directStreamingMinBytes(16 << 20, false, 0, 1.0) == size_t{16} << 20);       // L2 unknown
}

TEST_CASE(
    "where one rank's buffers are not from weftHostMemAlloc, every rank "
    "takes the copying path",
    "[host-memory][multiprocess]") {
  InfoLog info;
  auto outcomes = runRanks(
      3, [](RankContext& ctx) { return allReduceChecked(ctx, weft::coll::kDirectMinBytes / 4, 0, ctx.rank != 1); });
  expectAllPassed(outcomes);
  for (const RankOutcome& o : outcomes) {
    CHECK(contains(o.output.c_str(),
                   "took the copying path: rank 1's buffers "
                   "are not all from weftHostMemAlloc"));
    CHECK_FALSE(contains(o.output.c_str(), kDirect));
  }
}

TEST_CASE("below the threshold, weftHostMemAlloc buffers take the usual path", "[host-memory][multiprocess]") {
  InfoLog info;
  auto outcomes =
      runRanks(2, [](RankContext& ctx) { return allReduceChecked(ctx, weft::coll::kDirectMinBytes / 4 - 1, 0, true); });
  expectAllPassed(outcomes);
  for (const RankOutcome& o : outcomes) {
    CHECK_FALSE(contains(o.output.c_str(), kDirect));
    CHECK_FALSE(contains(o.output.c_str(), kCopying));
  }
}

TEST_CASE("a rank that gives up on a direct all-reduce makes a slower peer fail, not succeed",
          "[host-memory][multiprocess]") {
  // Rank 1 stops itself (SIGSTOP) early in a large all-reduce, while it sums its block out of
  // rank 0's input. Rank 0 sums its own, times out waiting for rank 1, rewrites its
  // input as a caller reusing it would, and lets rank 1 go on (SIGCONT). Summing on from the
  // rewritten input, rank 1 would hand back wrong sums as a success; it must fail instead.
  // Rank 2 is done with its block and waits for the others: it must fail as soon as rank 0 gives
  // up, while rank 1 is still stopped, not wait out its own, longer timeout.
  constexpr size_t kCount = 32 << 20;  // 128 MiB of floats: rank 1's block takes many milliseconds
  struct Returned {
    std::atomic<int> rank1{0}, rank2{0};
  };
  SharedAcrossRanks<Returned> shared;
  auto outcomes = runRanks(3, [returned = shared.get()](RankContext& ctx) {
    weftComm_t comm = rankComm(ctx, ctx.rank == 0 ? 2000 : (ctx.rank == 1 ? 10000 : 60000));
    if (comm == nullptr) return 1;
    const int64_t pid = getpid();
    int64_t pids[3] = {0, 0, 0};
    RANK_WEFT(ctx, weftAllGather(&pid, pids, 1, weftInt64, comm, nullptr));
    void* send = nullptr;
    void* recv = nullptr;
    RANK_WEFT(ctx, weftHostMemAlloc(&send, kCount * sizeof(float)));
    RANK_WEFT(ctx, weftHostMemAlloc(&recv, kCount * sizeof(float)));
    if (send == nullptr || recv == nullptr) return 1;
    auto* in = static_cast<float*>(send);
    std::fill(in, in + kCount, static_cast<float>(ctx.rank + 1));
    // Once through, so that mapping and first touches are behind the call that stops.
    RANK_WEFT(ctx, weftAllReduce(send, recv, kCount, weftFloat32, weftSum, comm, nullptr));
    int64_t together = 0;
    RANK_WEFT(ctx, weftAllReduce(&pid, &together, 1, weftInt64, weftMax, comm, nullptr));  // start together
    if (ctx.rank == 1) {
      // Stops as soon as this rank writes the first sum of its block, which only it writes: it is
      // then past the rounds that let its peers start, and has most of its block still to do.
      float* firstSum = static_cast<float*>(recv) + (kCount / 3 + std::min<size_t>(1, kCount % 3));
      *firstSum = 0.0f;
      std::atomic<bool> callReturned{false};
      std::thread stopper([firstSum, &callReturned] {
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (std::atomic_ref<float>(*firstSum).load(std::memory_order_relaxed) == 0.0f && !callReturned.load() &&
               std::chrono::steady_clock::now() < until) {
          std::this_thread::yield();
        }
        if (!callReturned.load()) kill(getpid(), SIGSTOP);
      });
      const weftResult_t rc = weftAllReduce(send, recv, kCount, weftFloat32, weftSum, comm, nullptr);
      callReturned.store(true);
      stopper.join();
      returned->rank1.store(1);
      const char* error = weftGetLastError(comm);
      RANK_CHECK(ctx, rc == weftRemoteError && contains(error, "rank 0") && contains(error, "gave up on this call"),
                 "after rank 0 gave up and rewrote its input: %s: %s", weftGetErrorString(rc), error);
    } else if (ctx.rank == 2) {
      const auto start = std::chrono::steady_clock::now();
      const weftResult_t rc = weftAllReduce(send, recv, kCount, weftFloat32, weftSum, comm, nullptr);
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const char* error = weftGetLastError(comm);
      RANK_CHECK(ctx, rc == weftRemoteError && contains(error, "rank 0") && contains(error, "gave up on this call"),
                 "rank 2, done with its block: %s: %s", weftGetErrorString(rc), error);
      RANK_CHECK(ctx, seconds < 10.0, "rank 2 failed only after %.1f s", seconds);
      returned->rank2.store(1);
    } else {
      const weftResult_t rc = weftAllReduce(send, recv, kCount, weftFloat32, weftSum, comm, nullptr);
      RANK_CHECK(ctx, rc == weftTimeout, "rank 0: %s: %s", weftGetErrorString(rc), weftGetLastError(comm));
      std::fill(in, in + kCount, -1.0f);
      const auto giveUpAt = std::chrono::steady_clock::now() + std::chrono::seconds(15);
      while (returned->rank2.load() == 0 && std::chrono::steady_clock::now() < giveUpAt) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      // Again and again until rank 1 is through: its stopper may stop it after the first.
      const auto contUntil = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      do {
        kill(static_cast<pid_t>(pids[1]), SIGCONT);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      } while (returned->rank1.load() == 0 && std::chrono::steady_clock::now() < contUntil);
    }
    RANK_WEFT(ctx, weftCommAbort(comm));
    RANK_WEFT(ctx, weftHostMemFree(send));
    RANK_WEFT(ctx, weftHostMemFree(recv));
    return 0;
  });
  expectAllPassed(outcomes);
}
