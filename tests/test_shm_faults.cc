// Shared memory under faults: a rank killed with SIGKILL in the middle of a large all-reduce,
// or while its peers wait for it in the arena (small all-reduces, all-gathers, direct all-reduces), gives every survivor an error
// within the timeout, and leaves no segment of the job in /dev/shm. Ranks are real processes on the shared-memory transport.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/unique_id.h"
#include "transport/shm/shm_segment.h"
#include "multiprocess.h"
#include "util/status.h"

using namespace weft;
using namespace weft::test;
using Clock = std::chrono::steady_clock;

namespace {

// The /dev/shm names of the job with this id start with this (see PeerMesh::adopt).
std::string segmentPrefix(const weftUniqueId& id) {
  auto contents = core::decodeUniqueId(id);
  uint64_t hash = core::fnv1a64(contents.value().secret.data(), contents.value().secret.size());
  return formatString("weft-%08x-", static_cast<unsigned>(hash));
}

std::vector<std::string> segmentsOf(const std::string& prefix) {
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    std::string name = entry.path().filename();
    if (name.rfind(prefix, 0) == 0) found.push_back(name);
  }
  return found;
}

// What a rank killed between creating a segment and its peer mapping it leaves behind: a
// segment of the job's that nobody else was told of. The survivors must remove it.
void leaveUnmappedSegment(const RankContext& ctx) {
  static transport::ShmSegment left;  // SIGKILL follows: never unlinked by this process
  auto made = transport::ShmSegment::create(segmentPrefix(ctx.id).substr(5) + "unmapped", 4096);
  if (made.isOk()) left = made.take();
}

// runRanks with WEFT_DEBUG=INFO, so that each outcome's output holds its rank's decisions
// (whether small all-reduces take the arena), followed by the usual exit-code check.
std::vector<RankOutcome> runRanksLoggingInfo(int nranks, const std::function<int(RankContext&)>& body) {
  setenv("WEFT_DEBUG", "INFO", 1);
  auto outcomes = runRanks(nranks, body);
  unsetenv("WEFT_DEBUG");
  INFO(describeFailures(outcomes));
  for (const auto& o : outcomes) CHECK(o.exitCode == 0);
  return outcomes;
}

// Every rank logged that its `collective` of `bytes` bytes went through the arena.
void expectOnArena(const std::vector<RankOutcome>& outcomes, const std::string& collective, size_t bytes) {
  const std::string line = collective + " of " + std::to_string(bytes) + " bytes on " + std::to_string(outcomes.size()) +
                           " ranks: one-shot through the shared-memory arena";
  for (const auto& o : outcomes) CHECK(o.output.find(line) != std::string::npos);
}

// Elements of 4 bytes that make 3 arena slots (512 KiB) and a ragged piece.
constexpr size_t kSeveralSlots = (size_t{3} << 17) + 5;

// 3 ranks over shared memory with the given timeout. `killDuring` runs on every rank after
// init: rank 2 dies in it by SIGKILL (leaving a segment no survivor has mapped), and the
// survivors return the status of the call that failed and when rank 2 was killed. Each
// survivor must have failed within `withinSeconds` with an accepted status, and leave nothing
// of the job in /dev/shm after abort.
struct KilledCall {
  weftResult_t rc;
  Clock::time_point killedAt;
};
void expectSurvivorsFail(int timeoutMs, double withinSeconds, bool (*accepted)(weftResult_t),
                         const std::function<KilledCall(RankContext&, weftComm_t)>& killDuring) {
  setenv("WEFT_TRANSPORT", "shm", 1);
  auto outcomes = runRanks(3, [&](RankContext& ctx) {
    weftComm_t comm = rankComm(ctx, timeoutMs);
    if (comm == nullptr) return 1;
    const KilledCall failed = killDuring(ctx, comm);
    double seconds = std::chrono::duration<double>(Clock::now() - failed.killedAt).count();
    RANK_CHECK(ctx, accepted(failed.rc), "rc %d: %s", failed.rc, weftGetLastError(comm));
    RANK_CHECK(ctx, seconds < withinSeconds, "error came %.2f s after the kill", seconds);
    std::printf("rank %d: error %.3f s after the kill: %s\n", ctx.rank, seconds, weftGetLastError(comm));
    RANK_WEFT(ctx, weftCommAbort(comm));
    auto left = segmentsOf(segmentPrefix(ctx.id));
    RANK_CHECK(ctx, left.empty(), "%zu segment(s) of the job left in /dev/shm", left.size());
    return 0;
  });
  unsetenv("WEFT_TRANSPORT");
  REQUIRE(outcomes.size() == 3);
  CHECK(outcomes[2].signal == SIGKILL);
  for (int r : {0, 1}) {
    INFO("rank " << r << ": " << outcomes[static_cast<size_t>(r)].output);
    CHECK(outcomes[static_cast<size_t>(r)].exitCode == 0);
  }
}

// An arena all-reduce (after one that set the arena up) during which rank 2 dies.
KilledCall killDuringSmallAllReduce(RankContext& ctx, weftComm_t comm) {
  float x = 1;
  RANK_WEFT(ctx, weftAllReduce(&x, &x, 1, weftFloat32, weftSum, comm, nullptr));
  if (ctx.rank == 2) {
    leaveUnmappedSegment(ctx);
    raise(SIGKILL);
  }
  const auto killedBy = Clock::now();
  return KilledCall{weftAllReduce(&x, &x, 1, weftFloat32, weftSum, comm, nullptr), killedBy};
}

// Rank 2 dies by SIGKILL `afterMs` from now, from another thread, while every rank repeats
// `call` (which returns its status) until it fails; rank 2 first leaves a segment unmapped
// where `leaveSegment` says so.
KilledCall killDuringRepeats(RankContext& ctx, int afterMs, bool leaveSegment,
                             const std::function<weftResult_t()>& call) {
  if (ctx.rank == 2) {
    if (leaveSegment) leaveUnmappedSegment(ctx);
    std::thread([afterMs] {
      std::this_thread::sleep_for(std::chrono::milliseconds(afterMs));
      raise(SIGKILL);
    }).detach();
  }
  auto killedAround = Clock::now() + std::chrono::milliseconds(afterMs);
  weftResult_t rc = weftSuccess;
  for (int repeat = 0; repeat < 1000 && rc == weftSuccess; ++repeat) rc = call();
  return KilledCall{rc, killedAround};
}

}  // namespace

TEST_CASE("shm: kill -9 of a rank mid-collective: survivors fail in time, /dev/shm is clean", "[shm][faults]") {
  constexpr int kTimeoutMs = 4000;
  expectSurvivorsFail(
      kTimeoutMs, 2.0 * kTimeoutMs / 1000,
      [](weftResult_t rc) { return rc == weftRemoteError || rc == weftSystemError || rc == weftTimeout; },
      [](RankContext& ctx, weftComm_t comm) {
        std::vector<float> v(16 << 20, 1.0f);  // 64 MiB: each call takes a while
        RANK_WEFT(ctx, weftAllReduce(v.data(), v.data(), v.size(), weftFloat32, weftSum, comm, nullptr));
        return killDuringRepeats(ctx, 30, true, [&] {
          return weftAllReduce(v.data(), v.data(), v.size(), weftFloat32, weftSum, comm, nullptr);
        });
      });
}

TEST_CASE("shm: kill -9 of a rank during small all-reduces on the arena: survivors see it gone", "[shm][faults]") {
  // Small all-reduces skip the connections (coll/arena_allreduce.h): a survivor waiting in the
  // arena must still notice that the peer's connection closed, long before the timeout.
  constexpr int kTimeoutMs = 30000;
  expectSurvivorsFail(
      kTimeoutMs, kTimeoutMs / 1000.0 / 2, [](weftResult_t rc) { return rc == weftRemoteError; },
      killDuringSmallAllReduce);
}

TEST_CASE("shm: a survivor spinning as long as WEFT_SPIN_US allows still sees a killed rank gone", "[shm][faults]") {
  // WEFT_SPIN_US takes up to 10 s; the arena's wait used to look at the peer (and the deadline)
  // only after its spin, so a survivor failed 10 s after the kill whatever the timeout.
  setenv("WEFT_SPIN_US", "10000000", 1);
  expectSurvivorsFail(
      30000, 5, [](weftResult_t rc) { return rc == weftRemoteError; },
      killDuringSmallAllReduce);
  unsetenv("WEFT_SPIN_US");
}

TEST_CASE("shm: kill -9 of a rank during large all-gathers on the arena: survivors see it gone", "[shm][faults]") {
  constexpr int kTimeoutMs = 30000;
  expectSurvivorsFail(
      kTimeoutMs, kTimeoutMs / 1000.0 / 2, [](weftResult_t rc) { return rc == weftRemoteError; },
      [](RankContext& ctx, weftComm_t comm) {
        const size_t block = size_t{4} << 20;  // floats: 16 MiB per rank, 32 pieces of the arena's slot
        std::vector<float> send(block, 1.0f), recv(block * static_cast<size_t>(ctx.nranks));
        RANK_WEFT(ctx, weftAllGather(send.data(), recv.data(), block, weftFloat32, comm, nullptr));
        return killDuringRepeats(ctx, 5, false, [&] {
          return weftAllGather(send.data(), recv.data(), block, weftFloat32, comm, nullptr);
        });
      });
}

TEST_CASE("shm: kill -9 of a rank during direct all-reduces on weftHostMemAlloc buffers: survivors see it gone",
          "[shm][faults]") {
  // The direct path (coll/direct_allreduce.h) reads a dead peer's buffers through its own
  // mapping (no SIGBUS), and waits for it in the arena, which sees its connection close.
  constexpr int kTimeoutMs = 30000;
  expectSurvivorsFail(
      kTimeoutMs, kTimeoutMs / 1000.0 / 2, [](weftResult_t rc) { return rc == weftRemoteError; },
      [](RankContext& ctx, weftComm_t comm) {
        const size_t count = size_t{4} << 20;  // 16 MiB of floats
        void* buffer = nullptr;
        RANK_WEFT(ctx, weftHostMemAlloc(&buffer, count * sizeof(float)));
        auto* v = static_cast<float*>(buffer);
        std::fill(v, v + count, 1.0f);
        RANK_WEFT(ctx, weftAllReduce(v, v, count, weftFloat32, weftSum, comm, nullptr));
        return killDuringRepeats(ctx, 5, false, [&] {  // the buffer goes with the process
          return weftAllReduce(v, v, count, weftFloat32, weftSum, comm, nullptr);
        });
      });
}

TEST_CASE("shm: a rank with shared memory disabled keeps every rank off the arena, together", "[shm][faults]") {
  // Whether small all-reduces take the arena, and which algorithm each call takes, must be
  // decided alike on every rank: one rank's WEFT_SHM_DISABLE=1 reaches the others through the
  // bootstrap, the plan puts its pairs on sockets, and no rank tries the arena.
  auto outcomes = runRanksLoggingInfo(3, [](RankContext& ctx) {
    if (ctx.rank == 2) setenv("WEFT_SHM_DISABLE", "1", 1);
    weftComm_t comm = rankComm(ctx, 20000);
    if (comm == nullptr) return 1;
    for (int call = 0; call < 200; ++call) {
      std::vector<int32_t> v(1 + call % 64, ctx.rank + call);
      RANK_WEFT(ctx, weftAllReduce(v.data(), v.data(), v.size(), weftInt32, weftSum, comm, nullptr));
      for (int32_t x : v) RANK_CHECK(ctx, x == 3 * call + 3, "call %d: sum %d", call, x);
    }
    RANK_WEFT(ctx, weftCommDestroy(comm));
    auto left = segmentsOf(segmentPrefix(ctx.id));
    RANK_CHECK(ctx, left.empty(), "%zu segment(s) of the job left in /dev/shm", left.size());
    return 0;
  });
  for (const auto& o : outcomes) CHECK(o.output.find("shared-memory arena") == std::string::npos);
}

TEST_CASE("shm: small all-reduces on every rank of a host go through the arena", "[shm][faults]") {
  // Each rank maps every other's arena segment: the names must last until all have.
  auto outcomes = runRanksLoggingInfo(4, [](RankContext& ctx) {
    weftComm_t comm = nullptr;
    RANK_WEFT(ctx, weftCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
    if (comm == nullptr) return 1;
    for (int call = 0; call < 100; ++call) {
      double x = ctx.rank + call;
      RANK_WEFT(ctx, weftAllReduce(&x, &x, 1, weftFloat64, weftMax, comm, nullptr));
      RANK_CHECK(ctx, x == 3 + call, "call %d: max %g", call, x);
    }
    auto left = segmentsOf(segmentPrefix(ctx.id));
    RANK_CHECK(ctx, left.empty(), "%zu segment(s) still named in /dev/shm", left.size());
    RANK_WEFT(ctx, weftCommDestroy(comm));
    return 0;
  });
  for (const auto& o : outcomes) CHECK(o.output.find("go through a shared-memory arena") != std::string::npos);
}

TEST_CASE("shm: all-gathers of every size on one host go through the arena, in pieces", "[shm][faults]") {
  // Blocks of 1 element to several slots (512 KiB) with a ragged last piece, in and out of place,
  // interleaved with small all-reduces on the same arena.
  auto outcomes = runRanksLoggingInfo(4, [](RankContext& ctx) {
    weftComm_t comm = nullptr;
    RANK_WEFT(ctx, weftCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
    if (comm == nullptr) return 1;
    const size_t n = static_cast<size_t>(ctx.nranks);
    for (size_t count : {size_t{1}, size_t{1000}, kSeveralSlots}) {
      for (bool inPlace : {false, true}) {
        std::vector<int32_t> recv(count * n + 1, -1);
        std::vector<int32_t> own(count);
        for (size_t i = 0; i < count; ++i) own[i] = static_cast<int32_t>(ctx.rank * 1000003 + i);
        int32_t* send = own.data();
        if (inPlace) {
          std::copy(own.begin(), own.end(), recv.begin() + static_cast<ptrdiff_t>(count * static_cast<size_t>(ctx.rank)));
          send = recv.data() + count * static_cast<size_t>(ctx.rank);
        }
        RANK_WEFT(ctx, weftAllGather(send, recv.data(), count, weftInt32, comm, nullptr));
        size_t wrong = 0;
        for (size_t r = 0; r < n; ++r) {
          for (size_t i = 0; i < count; ++i) wrong += recv[r * count + i] != static_cast<int32_t>(r * 1000003 + i);
        }
        RANK_CHECK(ctx, wrong == 0 && recv[count * n] == -1, "count %zu in place %d: %zu wrong", count, inPlace, wrong);
        int32_t x = ctx.rank;
        RANK_WEFT(ctx, weftAllReduce(&x, &x, 1, weftInt32, weftSum, comm, nullptr));
        RANK_CHECK(ctx, x == 6, "all-reduce between all-gathers: %d", x);
      }
    }
    RANK_WEFT(ctx, weftCommDestroy(comm));
    return 0;
  });
  expectOnArena(outcomes, "all-gather", kSeveralSlots * 4);
}

TEST_CASE("shm: broadcasts of every size and root on one host go through the arena", "[shm][faults]") {
  // Pieces from 1 element to several slots, in and out of place, each broadcast followed by a
  // one-element all-gather on the same arena (the non-roots' slots hold no broadcast data, but
  // the next call writes them).
  auto outcomes = runRanksLoggingInfo(4, [](RankContext& ctx) {
    weftComm_t comm = nullptr;
    RANK_WEFT(ctx, weftCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
    if (comm == nullptr) return 1;
    for (size_t count : {size_t{1}, size_t{1000}, kSeveralSlots}) {
      for (int root : {0, 3}) {
        for (bool inPlace : {false, true}) {
          std::vector<int32_t> data(count), recv(count + 1, -1);
          for (size_t i = 0; i < count; ++i) data[i] = static_cast<int32_t>(root * 7919 + i);
          int32_t* out = inPlace && ctx.rank == root ? data.data() : recv.data();
          RANK_WEFT(ctx, weftBroadcast(data.data(), out, count, weftInt32, root, comm, nullptr));
          size_t wrong = 0;
          for (size_t i = 0; i < count; ++i) wrong += out[i] != static_cast<int32_t>(root * 7919 + i);
          RANK_CHECK(ctx, wrong == 0 && recv[count] == -1, "count %zu root %d in place %d: %zu wrong", count, root,
                     inPlace, wrong);
          std::vector<int32_t> ranks(static_cast<size_t>(ctx.nranks), -1);
          int32_t mine = ctx.rank;
          RANK_WEFT(ctx, weftAllGather(&mine, ranks.data(), 1, weftInt32, comm, nullptr));
          for (int r = 0; r < ctx.nranks; ++r) RANK_CHECK(ctx, ranks[static_cast<size_t>(r)] == r, "all-gather after");
        }
      }
    }
    RANK_WEFT(ctx, weftCommDestroy(comm));
    return 0;
  });
  expectOnArena(outcomes, "broadcast", kSeveralSlots * 4);
}

TEST_CASE("shm: back-to-back broadcasts of several arena pieces on crowded ranks", "[shm][faults]") {
  // 5 ranks on however few cores: a non-root that is descheduled between pieces must not be
  // overtaken by a peer that reuses the slot it is about to read. A broken protocol hangs here,
  // so the timeout is short.
  auto outcomes = runRanks(5, [](RankContext& ctx) {
    weftComm_t comm = rankComm(ctx, 20000);
    if (comm == nullptr) return 1;
    const size_t count = (size_t{1} << 17) + 3;  // 2 pieces of the arena's slot
    std::vector<int32_t> data(count);
    for (int call = 0; call < 300; ++call) {
      const int root = call % 3;  // also runs of the same root
      for (size_t i = 0; i < count; i += 4099) data[i] = ctx.rank == root ? call + static_cast<int32_t>(i) : -1;
      RANK_WEFT(ctx, weftBroadcast(data.data(), data.data(), count, weftInt32, root, comm, nullptr));
      size_t wrong = 0;
      for (size_t i = 0; i < count; i += 4099) wrong += data[i] != call + static_cast<int32_t>(i);
      RANK_CHECK(ctx, wrong == 0, "call %d: %zu wrong", call, wrong);
      if (wrong != 0) break;
    }
    RANK_WEFT(ctx, weftCommDestroy(comm));
    return 0;
  });
  INFO(describeFailures(outcomes));
  for (const auto& o : outcomes) CHECK(o.exitCode == 0);
}

TEST_CASE("shm: no segment outlives its connection setup", "[shm][faults]") {
  setenv("WEFT_TRANSPORT", "shm", 1);
  auto outcomes = runRanks(4, [](RankContext& ctx) {
    weftComm_t comm = nullptr;
    RANK_WEFT(ctx, weftCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
    if (comm == nullptr) return 1;
    float x = 1;
    RANK_WEFT(ctx, weftAllReduce(&x, &x, 1, weftFloat32, weftSum, comm, nullptr));  // connects every pair
    // Every peer has mapped every segment by now, so none of the job's names is left.
    auto left = segmentsOf(segmentPrefix(ctx.id));
    RANK_CHECK(ctx, left.empty(), "%zu segment(s) still named in /dev/shm, e.g. %s", left.size(),
               left.empty() ? "" : left[0].c_str());
    RANK_WEFT(ctx, weftAllReduce(&x, &x, 1, weftFloat32, weftSum, comm, nullptr));
    RANK_CHECK(ctx, x == 16, "sum %g", x);
    RANK_WEFT(ctx, weftCommDestroy(comm));
    return 0;
  });
  unsetenv("WEFT_TRANSPORT");
  INFO(describeFailures(outcomes));
  for (const auto& o : outcomes) CHECK(o.exitCode == 0);
}

// A peer that has finished its part and exited leaves its end of the control socket readable
// (EOF) for good. A rank still waiting on another peer must sleep through that, not poll a
// descriptor that is always ready: ranks that share cores need the time it would burn.
TEST_CASE("shm: a rank waiting on a slow peer sleeps while a finished peer's socket reads EOF", "[shm][faults]") {
  const char* transport = GENERATE("shm", "socket");
  setenv("WEFT_TRANSPORT", transport, 1);
  auto outcomes = runRanks(3, [](RankContext& ctx) {
    weftComm_t comm = nullptr;
    RANK_WEFT(ctx, weftCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
    if (comm == nullptr) return 1;
    std::vector<float> out(ctx.nranks, 1), in(ctx.nranks, 0);
    RANK_WEFT(ctx, weftGroupStart());  // connects every pair
    for (int p = 0; p < ctx.nranks; ++p) {
      if (p == ctx.rank) continue;
      RANK_WEFT(ctx, weftSend(&out[p], 1, weftFloat32, p, comm, nullptr));
      RANK_WEFT(ctx, weftRecv(&in[p], 1, weftFloat32, p, comm, nullptr));
    }
    RANK_WEFT(ctx, weftGroupEnd());
    float x = static_cast<float>(ctx.rank);
    if (ctx.rank == 1) {
      RANK_WEFT(ctx, weftSend(&x, 1, weftFloat32, 0, comm, nullptr));
      std::fflush(nullptr);
      _exit(ctx.failures == 0 ? 0 : 1);  // gone without a word: rank 0 reads EOF from here on
    }
    if (ctx.rank == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      RANK_WEFT(ctx, weftSend(&x, 1, weftFloat32, 0, comm, nullptr));
      RANK_WEFT(ctx, weftCommDestroy(comm));
      return 0;
    }
    float from1 = -1, from2 = -1;
    const double cpuBefore = processCpuSeconds();
    const auto wallBefore = Clock::now();
    RANK_WEFT(ctx, weftGroupStart());
    RANK_WEFT(ctx, weftRecv(&from1, 1, weftFloat32, 1, comm, nullptr));
    RANK_WEFT(ctx, weftRecv(&from2, 1, weftFloat32, 2, comm, nullptr));
    RANK_WEFT(ctx, weftGroupEnd());
    const double cpuSeconds = processCpuSeconds() - cpuBefore;
    const double wallSeconds = std::chrono::duration<double>(Clock::now() - wallBefore).count();
    RANK_CHECK(ctx, from1 == 1 && from2 == 2, "received %g and %g", from1, from2);
    // Waiting about a second and a half: a sleeper uses a few milliseconds of it, a poller all.
    RANK_CHECK(ctx, cpuSeconds < 0.25 * wallSeconds, "%.3f s of CPU in %.3f s of waiting", cpuSeconds, wallSeconds);
    RANK_WEFT(ctx, weftCommDestroy(comm));
    return 0;
  });
  unsetenv("WEFT_TRANSPORT");
  INFO(describeFailures(outcomes));
  for (const auto& o : outcomes) CHECK(o.exitCode == 0);
}

enum class Creator { Exits, Lingers, LingersWithoutMainThread };

// Forks a process that creates a segment and leaves it named; the process exits at once, as
// if killed (Exits: no destructor runs), or sleeps until it is killed (its main thread too, or
// one other thread after main has called pthread_exit).
std::pair<std::string, pid_t> segmentLeftBy(Creator creator) {
  const bool lingers = creator != Creator::Exits;
  auto* page = static_cast<char*>(mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (page == MAP_FAILED) return {"", -1};
  page[0] = 0;
  pid_t child = fork();
  if (child == 0) {
    auto made = transport::ShmSegment::create("orphan-test", 4096);
    if (made.isOk()) std::snprintf(page + 1, 4000, "%s", made.value().name().c_str());
    __atomic_store_n(page, 1, __ATOMIC_RELEASE);
    if (creator == Creator::LingersWithoutMainThread) {
      std::thread([] {
        for (;;) pause();
      }).detach();
      // As pthread_exit in main, without unwinding through the test framework: the thread-group
      // leader becomes a zombie and the process lives on.
      syscall(SYS_exit, 0);
    }
    while (lingers) pause();
    _exit(0);
  }
  for (int i = 0; i < 10000 && __atomic_load_n(page, __ATOMIC_ACQUIRE) == 0; ++i) usleep(1000);
  std::string name(page + 1);
  munmap(page, 4096);
  if (!lingers) waitpid(child, nullptr, 0);
  return {name, child};
}

// Gives this process (and the ranks it forks) a /dev/shm of its own, where no other job's
// sweep removes what a test left there to be swept: ctest runs other shared-memory tests beside
// this one. False where mount namespaces are not permitted (not root).
bool privateDevShm() {
  if (unshare(CLONE_NEWNS) != 0) return false;
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return false;
  return mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777") == 0;
}

struct Reaper {  // a lingering child goes whatever fails (it holds the test's output open)
  pid_t pid;
  ~Reaper() {
    if (pid <= 0) return;
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
};

TEST_CASE("shm: a segment left by a process that died is removed by the next job", "[shm][faults]") {
  // A rank killed after creating its ring and before the peer mapped it leaves the name. Two
  // stand-ins: one that is gone (its segment must go), one still alive (its must stay). The
  // live one first: a stand-in's own first segment sweeps too.
  const bool isolated = privateDevShm();
  if (!isolated) WARN("no private /dev/shm (needs root): another job's sweep may come first");
  auto [live, livePid] = segmentLeftBy(Creator::Lingers);
  Reaper reaper{livePid};
  auto [dead, deadPid] = segmentLeftBy(Creator::Exits);
  REQUIRE(!dead.empty());
  REQUIRE(!live.empty());
  if (isolated) {
    REQUIRE(std::filesystem::exists("/dev/shm" + dead));
  } else if (!std::filesystem::exists("/dev/shm" + dead)) {
    WARN("another job swept the dead creator's segment before this one could");
  }

  setenv("WEFT_TRANSPORT", "shm", 1);
  auto outcomes = runRanks(2, [](RankContext& ctx) {
    weftComm_t comm = nullptr;
    RANK_WEFT(ctx, weftCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
    if (comm == nullptr) return 1;
    int32_t x = ctx.rank, y = -1;
    RANK_WEFT(ctx, weftGroupStart());  // creates the pair's rings
    RANK_WEFT(ctx, weftSend(&x, 1, weftInt32, 1 - ctx.rank, comm, nullptr));
    RANK_WEFT(ctx, weftRecv(&y, 1, weftInt32, 1 - ctx.rank, comm, nullptr));
    RANK_WEFT(ctx, weftGroupEnd());
    RANK_CHECK(ctx, y == 1 - ctx.rank, "received %d", y);
    RANK_WEFT(ctx, weftCommDestroy(comm));
    return 0;
  });
  unsetenv("WEFT_TRANSPORT");
  INFO(describeFailures(outcomes));
  for (const auto& o : outcomes) CHECK(o.exitCode == 0);
  CHECK_FALSE(std::filesystem::exists("/dev/shm" + dead));
  CHECK(std::filesystem::exists("/dev/shm" + live));
  shm_unlink(live.c_str());
  (void)deadPid;
}

TEST_CASE("shm: a creator whose main thread has exited while another runs is not gone", "[shm][faults]") {
  // Its leader shows as a zombie in /proc, which alone once read as gone and failed the live
  // peer's collectives. After SIGKILL it is gone.
  auto [name, pid] = segmentLeftBy(Creator::LingersWithoutMainThread);
  Reaper reaper{pid};
  REQUIRE(!name.empty());
  char state = 0;
  for (int i = 0; i < 1000 && state != 'Z'; ++i) {  // wait for the leader to be a zombie
    FILE* stat = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "re");
    if (stat != nullptr) {
      (void)std::fscanf(stat, "%*d %*s %c", &state);
      std::fclose(stat);
    }
    if (state != 'Z') usleep(1000);
  }
  CHECK(state == 'Z');
  CHECK_FALSE(transport::ShmSegment::creatorGone(name));
  kill(pid, SIGKILL);
  bool gone = false;
  for (int i = 0; i < 1000 && !gone; ++i) {  // a zombie, or exiting, until reaped below
    gone = transport::ShmSegment::creatorGone(name);
    if (!gone) usleep(1000);
  }
  CHECK(gone);
  shm_unlink(name.c_str());
}
