// Nothing outlives a communicator: after destroy, after abort, and after a peer died mid-
// collective, each rank has the file descriptors and threads it had before init, and /dev/shm
// holds none of the job's segments (counted by the job's own name prefix, so tests running
// beside this one do not disturb the count).
#include <catch2/catch.hpp>

#include <dirent.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/unique_id.h"
#include "multiprocess.h"

using namespace weft::test;

namespace {

int countEntries(const char* dir, const std::string& prefix = "") {
  DIR* d = ::opendir(dir);
  if (d == nullptr) return -1;
  int n = 0;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    if (prefix.empty() || std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) ++n;
  }
  ::closedir(d);
  return n - (prefix.empty() && std::strcmp(dir, "/proc/self/fd") == 0 ? 1 : 0);  // opendir's own fd
}

// The /dev/shm names of this job's segments start with "weft-" and the secret's hash.
std::string jobShmPrefix(const weftUniqueId& id) {
  auto contents = weft::core::decodeUniqueId(id);
  if (!contents.isOk()) return "weft-unknown";
  auto& secret = contents.value().secret;
  uint64_t hash = weft::core::fnv1a64(secret.data(), secret.size());
  char prefix[32];
  std::snprintf(prefix, sizeof prefix, "weft-%08x", static_cast<unsigned>(hash));
  return prefix;
}

struct Census {
  int fds, threads, segments;
  bool operator==(const Census&) const = default;
};

Census takeCensus(const std::string& shmPrefix) {
  return {countEntries("/proc/self/fd"), countEntries("/proc/self/task"), countEntries("/dev/shm", shmPrefix)};
}

// Rank 0 also hosts the id's bootstrap root, whose thread ends once every rank has joined; wait
// (briefly) for the counts to settle back.
Census settledCensus(const std::string& prefix, const Census& want) {
  Census now = takeCensus(prefix);
  for (int i = 0; i < 100 && !(now == want); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    now = takeCensus(prefix);
  }
  return now;
}

void exercise(RankContext& ctx, weftComm_t comm) {
  std::vector<float> data(300000, 1.0f);  // several shm ring laps, and sockets' striping
  RANK_WEFT(ctx, weftAllReduce(data.data(), data.data(), data.size(), weftFloat32, weftSum, comm, nullptr));
  RANK_WEFT(ctx, weftBroadcast(data.data(), data.data(), 1000, weftFloat32, 0, comm, nullptr));
  weftStream_t stream = nullptr;
  RANK_WEFT(ctx, weftStreamCreate(&stream));
  RANK_WEFT(ctx, weftAllReduce(data.data(), data.data(), 10, weftFloat32, weftSum, comm, stream));
  RANK_WEFT(ctx, weftStreamSynchronize(stream));
  RANK_WEFT(ctx, weftStreamDestroy(stream));
}

// Communicators under test get fresh ids from rank 0 over a helper communicator made before the
// baseline. Rank 0 also hosts each id's bootstrap root (a thread and a socket that end once all
// ranks joined), so fds and threads are compared on the other ranks, which run the same
// communicator code; segments are compared everywhere.
weftComm_t freshComm(RankContext& ctx, weftComm_t helper, int timeoutMs) {
  weftUniqueId id{};
  if (ctx.rank == 0) RANK_WEFT(ctx, weftGetUniqueId(&id));
  RANK_WEFT(ctx, weftBroadcast(&id, &id, sizeof(id), weftUint8, 0, helper, nullptr));
  weftConfig_t config = WEFT_CONFIG_INITIALIZER;
  config.timeoutMs = timeoutMs;
  weftComm_t comm = nullptr;
  RANK_WEFT(ctx, weftCommInitRankConfig(&comm, ctx.nranks, id, ctx.rank, &config));
  return comm;
}

void checkCensus(RankContext& ctx, const char* when, const std::string& prefix, const Census& before) {
  Census after = settledCensus(prefix, before);
  if (ctx.rank == 0) after.fds = before.fds, after.threads = before.threads;
  RANK_CHECK(ctx, after == before, "%s: fds %d -> %d, threads %d -> %d, segments %d -> %d", when, before.fds, after.fds,
             before.threads, after.threads, before.segments, after.segments);
}

}  // namespace

TEST_CASE("leaks: destroy, abort and a dead peer give back every fd, thread and segment", "[leaks][multiprocess]") {
  for (const char* transport : {"shm", "socket"}) {
    DYNAMIC_SECTION(transport) {
      setenv("WEFT_TRANSPORT", transport, 1);
      auto outcomes = runRanks(3, [](RankContext& ctx) {
        const std::string prefix = jobShmPrefix(ctx.id);
        const Census bare = takeCensus(prefix);
        weftComm_t helper = nullptr;
        RANK_WEFT(ctx, weftCommInitRank(&helper, ctx.nranks, ctx.id, ctx.rank));
        if (helper == nullptr) return 1;
        RANK_WEFT(ctx, weftBarrier(helper, nullptr));  // connects the helper's peers
        const Census before = takeCensus(prefix);

        for (bool abort : {false, true}) {
          weftComm_t comm = freshComm(ctx, helper, 60000);
          if (comm == nullptr) return 1;
          exercise(ctx, comm);
          RANK_WEFT(ctx, abort ? weftCommAbort(comm) : weftCommDestroy(comm));
          checkCensus(ctx, abort ? "after abort" : "after destroy", prefix, before);
        }

        // Rank 2 dies between two collectives; the others fail, abort, and hold nothing after.
        weftComm_t comm = freshComm(ctx, helper, 3000);
        if (comm == nullptr) return 1;
        exercise(ctx, comm);
        if (ctx.rank == 2) _exit(0);
        std::vector<float> data(100000, 1.0f);
        weftResult_t rc = weftAllReduce(data.data(), data.data(), data.size(), weftFloat32, weftSum, comm, nullptr);
        RANK_CHECK(ctx, rc != weftSuccess, "an all-reduce with a dead peer succeeded");
        RANK_WEFT(ctx, weftCommAbort(comm));
        RANK_WEFT(ctx, weftCommAbort(helper));  // it included the dead rank too
        checkCensus(ctx, "after a peer died and both communicators were aborted", prefix, bare);
        return ctx.failures ? 1 : 0;
      });
      unsetenv("WEFT_TRANSPORT");
      INFO(describeFailures(outcomes));
      for (const auto& o : outcomes) CHECK(o.exitCode == 0);
    }
  }
}

namespace {

// A thread_local that owns a communicator and destroys it when its thread exits, after the
// library's own thread_locals of that thread may already be gone.
struct ExitDestroyer {
  weftComm_t comm = nullptr;
  std::atomic<int>* result = nullptr;
  ~ExitDestroyer() {
    if (comm != nullptr) result->store(weftCommDestroy(comm));
  }
};

}  // namespace

TEST_CASE("lifecycle: a communicator destroyed by a thread_local at thread exit", "[leaks][multiprocess]") {
  auto outcomes = runRanks(1, [](RankContext& ctx) {
    std::atomic<int> result{-1};
    std::thread([&] {
      thread_local ExitDestroyer destroyer;  // made first, so destroyed after Weft's thread_locals
      destroyer.result = &result;
      weftComm_t first = soloComm(ctx);
      float x = 1;
      // Looked up on this thread and destroyed: the lookup this thread remembers is of a handle
      // that is gone when the thread exits.
      RANK_WEFT(ctx, weftAllReduce(&x, &x, 1, weftFloat32, weftSum, first, nullptr));
      RANK_WEFT(ctx, weftCommDestroy(first));
      destroyer.comm = soloComm(ctx);
    }).join();
    RANK_CHECK(ctx, result.load() == weftSuccess, "destroy at thread exit returned %d", result.load());
    return ctx.failures ? 1 : 0;
  });
  INFO(describeFailures(outcomes));
  for (const auto& o : outcomes) CHECK(o.exitCode == 0);
}
