// Communicator split (colors, keys, NOCOLOR, a rejected rank, non-blocking) and init-all
// (ranks as threads of one process, inits in a group), across real processes.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "multiprocess.h"

using namespace weft::test;

TEST_CASE("split: colors, key order, NOCOLOR, and the new communicators work", "[split][multiprocess]") {
  expectAllPassed(runRanks(5, [](RankContext& ctx) {
    weftComm_t comm = rankComm(ctx);
    if (comm == nullptr) return 1;
    const int r = ctx.rank;
    // Rank 4 opts out; the others split by parity, ordered by descending parent rank (key).
    const int color = r == 4 ? WEFT_SPLIT_NOCOLOR : r % 2;
    weftComm_t half = nullptr;
    RANK_WEFT(ctx, weftCommSplit(comm, color, -r, &half, nullptr));
    if (r == 4) {
      RANK_CHECK(ctx, half == nullptr, "NOCOLOR rank got a communicator");
    } else {
      int size = 0, newRank = -1;
      RANK_WEFT(ctx, weftCommCount(half, &size));
      RANK_WEFT(ctx, weftCommUserRank(half, &newRank));
      const int expectRank = r % 2 == 0 ? (r == 2 ? 0 : 1) : (r == 3 ? 0 : 1);
      RANK_CHECK(ctx, size == 2 && newRank == expectRank, "size %d rank %d, want 2 and %d", size, newRank, expectRank);
      int32_t v = r;
      RANK_WEFT(ctx, weftAllReduce(&v, &v, 1, weftInt32, weftSum, half, nullptr));
      RANK_CHECK(ctx, v == (r % 2 ? 1 + 3 : 0 + 2), "sum over the split: %d", v);
      RANK_WEFT(ctx, weftCommDestroy(half));
    }
    // The parent still works, and a non-blocking split completes when polled.
    weftConfig_t config = WEFT_CONFIG_INITIALIZER;
    config.blocking = 0;
    weftComm_t all = nullptr;
    weftResult_t rc = weftCommSplit(comm, 0, 0, &all, &config);
    RANK_CHECK(ctx, rc == weftInProgress || rc == weftSuccess, "non-blocking split: %d", rc);
    weftResult_t state = weftInProgress;
    while (all != nullptr && state == weftInProgress) RANK_WEFT(ctx, weftCommGetAsyncError(all, &state));
    RANK_CHECK(ctx, state == weftSuccess, "non-blocking split ended %d", state);
    int newRank = -1;
    RANK_WEFT(ctx, weftCommUserRank(all, &newRank));
    RANK_CHECK(ctx, newRank == r, "equal keys keep the parent's order: rank %d became %d", r, newRank);
    int32_t v = 1;
    RANK_WEFT(ctx, weftAllReduce(&v, &v, 1, weftInt32, weftSum, all, nullptr));
    RANK_CHECK(ctx, v == ctx.nranks, "sum over the whole split: %d", v);
    RANK_WEFT(ctx, weftCommDestroy(all));

    // One rank's bad color fails the split on every rank at once (not at the timeout), and
    // leaves the parent working.
    const auto start = std::chrono::steady_clock::now();
    weftComm_t none = nullptr;
    rc = weftCommSplit(comm, r == 2 ? -5 : 0, 0, &none, nullptr);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (r == 2) {
      RANK_CHECK(ctx, rc == weftInvalidArgument, "the bad color returned %d", rc);
    } else {
      RANK_CHECK(ctx, rc == weftInvalidUsage, "a split with a rejected rank returned %d", rc);
      RANK_CHECK(ctx, std::strstr(weftGetLastError(comm), "rank 2") != nullptr, "error: %s", weftGetLastError(comm));
    }
    RANK_CHECK(ctx, none == nullptr && seconds < 10, "newcomm %p after %.1f s", static_cast<void*>(none), seconds);
    v = 1;
    RANK_WEFT(ctx, weftAllReduce(&v, &v, 1, weftInt32, weftSum, comm, nullptr));
    RANK_CHECK(ctx, v == ctx.nranks, "sum over the parent after the rejected split: %d", v);
    // So does one rank's NULL newcomm.
    rc = weftCommSplit(comm, 0, 0, r == 1 ? nullptr : &none, nullptr);
    if (r == 1) {
      RANK_CHECK(ctx, rc == weftInvalidArgument, "the NULL newcomm returned %d", rc);
    } else {
      RANK_CHECK(ctx, rc == weftInvalidUsage && std::strstr(weftGetLastError(comm), "rank 1") != nullptr,
                 "a split with a NULL newcomm on rank 1 returned %d: %s", rc, weftGetLastError(comm));
    }
    v = 1;
    RANK_WEFT(ctx, weftAllReduce(&v, &v, 1, weftInt32, weftSum, comm, nullptr));
    RANK_CHECK(ctx, v == ctx.nranks, "sum over the parent after the split with a NULL newcomm: %d", v);
    RANK_WEFT(ctx, weftCommDestroy(comm));
    return 0;
  }));
}

TEST_CASE("init-all: ranks as threads, one thread driving them all in a group, inits in a group", "[split][multiprocess]") {
  // In a child process, like every other multi-rank test (the communicators' threads stay there).
  expectAllPassed(runRanks(1, [](RankContext& ctx) {
    constexpr int n = 3;
    weftComm_t comms[n] = {};
    RANK_WEFT(ctx, weftCommInitAll(comms, n, nullptr));
    for (int i = 0; i < n; ++i) {
      int rank = -1, size = 0;
      RANK_WEFT(ctx, weftCommUserRank(comms[i], &rank));
      RANK_WEFT(ctx, weftCommCount(comms[i], &size));
      RANK_CHECK(ctx, rank == i && size == n, "comm %d: rank %d of %d", i, rank, size);
    }
    // One thread per rank.
    std::vector<std::vector<double>> data(n, std::vector<double>(5000));
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i) {
      threads.emplace_back([&, i] {
        std::fill(data[static_cast<size_t>(i)].begin(), data[static_cast<size_t>(i)].end(), i + 1.0);
        auto& d = data[static_cast<size_t>(i)];
        (void)weftAllReduce(d.data(), d.data(), d.size(), weftFloat64, weftSum, comms[i], nullptr);
      });
    }
    for (auto& t : threads) t.join();
    for (int i = 0; i < n; ++i) RANK_CHECK(ctx, data[static_cast<size_t>(i)][4999] == 6.0, "threaded rank %d", i);
    // One thread, one group over every rank's communicator (NCCL's single-process pattern).
    auto allReduceInOneGroup = [&] {
      RANK_WEFT(ctx, weftGroupStart());
      for (int i = 0; i < n; ++i) {
        auto& d = data[static_cast<size_t>(i)];
        RANK_WEFT(ctx, weftAllReduce(d.data(), d.data(), d.size(), weftFloat64, weftSum, comms[i], nullptr));
      }
      RANK_WEFT(ctx, weftGroupEnd());
    };
    allReduceInOneGroup();
    for (int i = 0; i < n; ++i) RANK_CHECK(ctx, data[static_cast<size_t>(i)][0] == 18.0, "grouped rank %d", i);
    for (int i = 0; i < n; ++i) RANK_WEFT(ctx, weftCommDestroy(comms[i]));

    // NCCL's other single-thread pattern: every rank's init inside one group. Each init runs
    // on a thread of its own and weftGroupEnd waits for all (inline, the first would wait for
    // the others until the timeout).
    weftUniqueId id;
    RANK_WEFT(ctx, weftGetUniqueId(&id));
    weftConfig_t config = WEFT_CONFIG_INITIALIZER;
    config.timeoutMs = 20000;
    RANK_WEFT(ctx, weftGroupStart());
    for (int i = 0; i < n; ++i) RANK_WEFT(ctx, weftCommInitRankConfig(&comms[i], n, id, i, &config));
    RANK_WEFT(ctx, weftGroupEnd());
    allReduceInOneGroup();
    for (int i = 0; i < n; ++i) RANK_CHECK(ctx, data[static_cast<size_t>(i)][0] == 54.0, "rank %d inited in a group", i);
    for (int i = 0; i < n; ++i) RANK_WEFT(ctx, weftCommDestroy(comms[i]));

    // Non-blocking inits in a group: weftGroupEnd leaves them running and says so. They cannot
    // have finished by then: the last rank joins only afterwards.
    RANK_WEFT(ctx, weftGetUniqueId(&id));
    config.blocking = 0;
    RANK_WEFT(ctx, weftGroupStart());
    for (int i = 0; i < n - 1; ++i) {
      weftResult_t rc = weftCommInitRankConfig(&comms[i], n, id, i, &config);
      RANK_CHECK(ctx, rc == weftInProgress, "non-blocking init %d in a group returned %d", i, rc);
    }
    weftResult_t ended = weftGroupEnd();
    RANK_CHECK(ctx, ended == weftInProgress, "weftGroupEnd over running non-blocking inits returned %d", ended);
    weftResult_t rc = weftCommInitRankConfig(&comms[n - 1], n, id, n - 1, &config);
    RANK_CHECK(ctx, rc == weftInProgress, "the last non-blocking init returned %d", rc);
    for (int i = 0; i < n; ++i) {
      weftResult_t state = weftInProgress;
      while (state == weftInProgress) RANK_WEFT(ctx, weftCommGetAsyncError(comms[i], &state));
      RANK_CHECK(ctx, state == weftSuccess, "non-blocking init %d ended with %d", i, state);
    }
    allReduceInOneGroup();
    for (int i = 0; i < n; ++i) RANK_CHECK(ctx, data[static_cast<size_t>(i)][0] == 162.0, "rank %d inited non-blocking", i);
    for (int i = 0; i < n; ++i) RANK_WEFT(ctx, weftCommDestroy(comms[i]));
    return 0;
  }));
}
