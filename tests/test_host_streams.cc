// Host streams: collectives queued on a stream return at once and complete in order on the
// communicator's progress thread; blocking calls keep the communicator's issue order; errors
// reach weftStreamSynchronize and weftCommGetAsyncError; weftCommFinalize flushes them. Ranks
// are real processes.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "multiprocess.h"

using namespace weft::test;

namespace {

// A second id for a second communicator, made by rank 0 and shared through the first.
weftUniqueId secondId(RankContext& ctx, weftComm_t comm) {
  weftUniqueId id{};
  if (ctx.rank == 0) RANK_WEFT(ctx, weftGetUniqueId(&id));
  RANK_WEFT(ctx, weftAllReduce(&id, &id, sizeof(id), weftUint8, weftMax, comm, nullptr));
  return id;
}

}  // namespace

TEST_CASE("host streams: a queued collective returns before its peers have joined", "[streams][multiprocess]") {
  expectAllPassed(runRanks(2, [](RankContext& ctx) {
    weftComm_t comm = rankComm(ctx);
    if (comm == nullptr) return 1;
    weftStream_t stream = nullptr;
    RANK_WEFT(ctx, weftStreamCreate(&stream));
    std::vector<float> v(1 << 16, static_cast<float>(ctx.rank + 1));
    if (ctx.rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(500));
    RANK_WEFT(ctx, weftAllReduce(v.data(), v.data(), v.size(), weftFloat32, weftSum, comm, stream));
    if (ctx.rank == 0) {
      // Rank 1 is still asleep, so the collective cannot have finished: the call was asynchronous.
      RANK_CHECK(ctx, weftStreamQuery(stream) == weftInProgress, "the stream was already idle");
    }
    RANK_WEFT(ctx, weftStreamSynchronize(stream));
    RANK_CHECK(ctx, weftStreamQuery(stream) == weftSuccess, "idle stream not reported done");
    RANK_CHECK(ctx, v.front() == 3 && v.back() == 3, "sum %g %g", v.front(), v.back());
    RANK_WEFT(ctx, weftStreamDestroy(stream));
    RANK_WEFT(ctx, weftCommDestroy(comm));
    return 0;
  }));
}

TEST_CASE("host streams: synchronize or query inside the group that holds the stream's calls is refused",
          "[streams][multiprocess]") {
  // The group's calls are queued at weftGroupEnd: a synchronize before it would return with the
  // buffer still unreduced.
  expectAllPassed(runRanks(2, [](RankContext& ctx) {
    weftComm_t comm = rankComm(ctx);
    if (comm == nullptr) return 1;
    weftStream_t stream = nullptr, other = nullptr;
    RANK_WEFT(ctx, weftStreamCreate(&stream));
    RANK_WEFT(ctx, weftStreamCreate(&other));
    float v = static_cast<float>(ctx.rank + 1);
    RANK_WEFT(ctx, weftGroupStart());
    RANK_WEFT(ctx, weftAllReduce(&v, &v, 1, weftFloat32, weftSum, comm, stream));
    for (weftResult_t rc : {weftStreamSynchronize(stream), weftStreamQuery(stream)}) {
      RANK_CHECK(ctx, rc == weftInvalidUsage && std::strstr(weftGetLastError(nullptr), "call it first") != nullptr,
                 "returned %d: %s", rc, weftGetLastError(nullptr));
    }
    RANK_WEFT(ctx, weftStreamSynchronize(other));  // a stream the group holds nothing for
    RANK_WEFT(ctx, weftGroupEnd());
    RANK_WEFT(ctx, weftStreamSynchronize(stream));
    RANK_CHECK(ctx, v == 3, "sum %g", v);
    RANK_WEFT(ctx, weftStreamDestroy(stream));
    RANK_WEFT(ctx, weftStreamDestroy(other));
    RANK_WEFT(ctx, weftCommDestroy(comm));
    return 0;
  }));
}

TEST_CASE("host streams: synchronize waits as long as the communicator's timeout allows", "[streams][multiprocess]") {
  // The default timeout (WEFT_TIMEOUT_MS) is short, the communicator's is long (as
  // init_process_group's 30 minutes against the 5-minute default): a peer 3 s late is within
  // the communicator's, so synchronize must not give up at the default's backstop (2 x 0.5 s + 1 s).
  // Set in each rank once the unique id (whose root lives as long as the default allows) exists.
  expectAllPassed(runRanks(2, [](RankContext& ctx) {
    setenv("WEFT_TIMEOUT_MS", "500", 1);  // a fresh child process: no other thread reads it
    weftComm_t comm = rankComm(ctx, 20000);
    if (comm == nullptr) return 1;
    weftStream_t stream = nullptr;
    RANK_WEFT(ctx, weftStreamCreate(&stream));
    float x = static_cast<float>(ctx.rank + 1);
    if (ctx.rank == 1) std::this_thread::sleep_for(std::chrono::seconds(3));
    RANK_WEFT(ctx, weftAllReduce(&x, &x, 1, weftFloat32, weftSum, comm, stream));
    RANK_WEFT(ctx, weftStreamSynchronize(stream));
    RANK_CHECK(ctx, x == 3, "sum %g", x);
    RANK_WEFT(ctx, weftStreamDestroy(stream));
    RANK_WEFT(ctx, weftCommDestroy(comm));
    return 0;
  }));
}

TEST_CASE("host streams: operations complete in order, across communicators and with blocking calls",
          "[streams][multiprocess]") {
  expectAllPassed(runRanks(3, [](RankContext& ctx) {
    weftComm_t a = rankComm(ctx);
    if (a == nullptr) return 1;
    weftComm_t b = rankComm(ctx, secondId(ctx, a));
    if (b == nullptr) return 1;
    weftStream_t stream = nullptr;
    RANK_WEFT(ctx, weftStreamCreate(&stream));
    // Each step reads the previous step's output, so any reordering changes the result.
    std::vector<int64_t> x(1000, ctx.rank + 1), y(1000), z(1000);
    if (ctx.rank == 2) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    RANK_WEFT(ctx, weftAllReduce(x.data(), y.data(), x.size(), weftInt64, weftSum, a, stream));  // y = 6
    RANK_WEFT(ctx, weftAllReduce(y.data(), z.data(), y.size(), weftInt64, weftSum, b, stream));  // z = 18 (other comm)
    RANK_WEFT(ctx, weftAllReduce(z.data(), z.data(), z.size(), weftInt64, weftProd, a, stream));  // z = 18^3
    // A blocking call on `a` runs after everything issued on `a` before it.
    RANK_WEFT(ctx, weftAllReduce(z.data(), x.data(), z.size(), weftInt64, weftMax, a, nullptr));
    RANK_CHECK(ctx, x[0] == 18 * 18 * 18 && x[999] == 18 * 18 * 18, "x %ld", static_cast<long>(x[0]));
    RANK_WEFT(ctx, weftStreamSynchronize(stream));
    RANK_CHECK(ctx, y[0] == 6 && z[0] == 18 * 18 * 18, "y %ld z %ld", static_cast<long>(y[0]), static_cast<long>(z[0]));
    // Many back-to-back queued calls on two streams.
    weftStream_t other = nullptr;
    RANK_WEFT(ctx, weftStreamCreate(&other));
    std::vector<std::vector<int32_t>> bufs(64, std::vector<int32_t>(257));
    for (size_t i = 0; i < bufs.size(); ++i) {
      std::fill(bufs[i].begin(), bufs[i].end(), static_cast<int32_t>(i) + ctx.rank);
      RANK_WEFT(ctx, weftAllReduce(bufs[i].data(), bufs[i].data(), bufs[i].size(), weftInt32, weftSum,
                                   i % 2 ? a : b, i % 3 ? stream : other));
    }
    RANK_WEFT(ctx, weftStreamSynchronize(stream));
    RANK_WEFT(ctx, weftStreamSynchronize(other));
    for (size_t i = 0; i < bufs.size(); ++i) {
      RANK_CHECK(ctx, bufs[i][256] == 3 * static_cast<int32_t>(i) + 3, "buffer %zu: %d", i, bufs[i][256]);
    }
    RANK_WEFT(ctx, weftStreamDestroy(stream));
    RANK_WEFT(ctx, weftStreamDestroy(other));
    RANK_WEFT(ctx, weftCommDestroy(b));
    RANK_WEFT(ctx, weftCommDestroy(a));
    return 0;
  }));
}

TEST_CASE("host streams: an operation waits for earlier ones on other communicators as long as they progress",
          "[streams][multiprocess]") {
  // Rank 0 queues two all-reduces on `a` and then one on `b`, all on one stream. Rank 1 joins
  // each of the `a` calls 2 s late: each ends within a's 3 s timeout, both together after it.
  // `b`'s call must wait its turn and run, not time out while its predecessors still move.
  expectAllPassed(runRanks(2, [](RankContext& ctx) {
    weftComm_t a = rankComm(ctx, 3000);
    if (a == nullptr) return 1;
    weftComm_t b = rankComm(ctx, secondId(ctx, a), 3000);
    if (b == nullptr) return 1;
    weftStream_t stream = nullptr;
    RANK_WEFT(ctx, weftStreamCreate(&stream));
    std::vector<int32_t> x(64, ctx.rank + 1), y(64, 0);
    for (int i = 0; i < 2; ++i) {
      if (ctx.rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(2000));
      RANK_WEFT(ctx, weftAllReduce(x.data(), x.data(), x.size(), weftInt32, weftSum, a, stream));
      if (ctx.rank == 1) RANK_WEFT(ctx, weftStreamSynchronize(stream));
    }
    RANK_WEFT(ctx, weftAllReduce(x.data(), y.data(), x.size(), weftInt32, weftSum, b, stream));
    RANK_WEFT(ctx, weftStreamSynchronize(stream));
    RANK_CHECK(ctx, x[0] == 6 && y[63] == 12, "x %d y %d (expected 6 and 12)", x[0], y[63]);
    // And `b` is still in step: a blocking call on it pairs with the peer's.
    RANK_WEFT(ctx, weftAllReduce(y.data(), y.data(), y.size(), weftInt32, weftSum, b, nullptr));
    RANK_CHECK(ctx, y[0] == 24, "y %d (expected 24)", y[0]);
    RANK_WEFT(ctx, weftStreamDestroy(stream));
    RANK_WEFT(ctx, weftCommDestroy(b));
    RANK_WEFT(ctx, weftCommDestroy(a));
    return 0;
  }));
}

TEST_CASE("host streams: errors reach the stream and the communicator", "[streams][multiprocess]") {
  expectAllPassed(runRanks(2, [](RankContext& ctx) {
    weftComm_t comm = rankComm(ctx, 3000);
    if (comm == nullptr) return 1;
    float x[4] = {1, 2, 3, 4};
    int invented = 0;
    RANK_CHECK(ctx, weftAllReduce(x, x, 4, weftFloat32, weftSum, comm, &invented) == weftInvalidArgument,
               "an invented stream was accepted");
    RANK_CHECK(ctx, weftStreamSynchronize(&invented) == weftInvalidArgument, "synchronize on an invented stream");
    RANK_CHECK(ctx, weftStreamCreate(nullptr) == weftInvalidArgument, "create into NULL");
    weftStream_t stream = nullptr;
    RANK_WEFT(ctx, weftStreamCreate(&stream));
    // Mismatched counts: the queued collective fails on both ranks, within the timeout.
    std::vector<float> v(ctx.rank == 0 ? 100 : 200, 1.0f);
    RANK_WEFT(ctx, weftAllReduce(v.data(), v.data(), v.size(), weftFloat32, weftSum, comm, stream));
    weftResult_t rc = weftStreamSynchronize(stream);
    RANK_CHECK(ctx, rc != weftSuccess && rc != weftInProgress, "synchronize returned %d", rc);
    RANK_CHECK(ctx, std::strstr(weftGetLastError(nullptr), "weftAllReduce") != nullptr, "text: %s",
               weftGetLastError(nullptr));
    weftResult_t async = weftSuccess;
    RANK_WEFT(ctx, weftCommGetAsyncError(comm, &async));
    RANK_CHECK(ctx, async == rc, "async error %d, stream error %d", async, rc);
    RANK_CHECK(ctx, weftStreamQuery(stream) == rc, "query does not keep the error");
    RANK_WEFT(ctx, weftStreamDestroy(stream));
    RANK_CHECK(ctx, weftStreamDestroy(stream) == weftInvalidArgument, "double destroy");
    RANK_WEFT(ctx, weftCommAbort(comm));
    return 0;
  }));
}

TEST_CASE("host streams: destroy lets queued work finish", "[streams][multiprocess]") {
  expectAllPassed(runRanks(2, [](RankContext& ctx) {
    weftComm_t comm = rankComm(ctx);
    if (comm == nullptr) return 1;
    weftStream_t stream = nullptr;
    RANK_WEFT(ctx, weftStreamCreate(&stream));
    std::vector<std::vector<double>> bufs(16, std::vector<double>(4096, 1.0));
    for (auto& b : bufs) RANK_WEFT(ctx, weftAllReduce(b.data(), b.data(), b.size(), weftFloat64, weftSum, comm, stream));
    RANK_WEFT(ctx, weftCommDestroy(comm));  // returns once the queue has run out
    RANK_CHECK(ctx, weftStreamQuery(stream) == weftSuccess, "work left on the stream after destroy");
    for (auto& b : bufs) RANK_CHECK(ctx, b[4095] == 2.0, "value %g", b[4095]);
    RANK_WEFT(ctx, weftStreamDestroy(stream));
    return 0;
  }));
}

TEST_CASE("host streams: NULL, whose calls complete before returning, has nothing to wait for", "[streams]") {
  CHECK(weftStreamSynchronize(nullptr) == weftSuccess);
  CHECK(weftStreamQuery(nullptr) == weftSuccess);
  int notAStream = 0;
  CHECK(weftStreamSynchronize(&notAStream) == weftInvalidArgument);
}

TEST_CASE("host streams: two threads issuing on one stream and communicator", "[streams][multiprocess]") {
  // A place on the stream was taken and the task queued in two steps: a thread that took place
  // k+1 could queue before the one with place k, and the worker then waited for k, queued
  // behind it, until the timeout.
  constexpr int kPerThread = 2000;
  expectAllPassed(runRanks(2, [](RankContext& ctx) {
    weftComm_t comm = rankComm(ctx, 5000);
    if (comm == nullptr) return 1;
    weftStream_t stream = nullptr;
    RANK_WEFT(ctx, weftStreamCreate(&stream));
    // Every call is alike, so the ranks' calls pair up whichever thread issued them.
    std::vector<float> values(2 * kPerThread, 1.0f);
    std::vector<weftResult_t> issued(2, weftSuccess);
    auto issue = [&](int t) {
      for (int i = 0; i < kPerThread && issued[t] == weftSuccess; ++i) {
        float* v = &values[static_cast<size_t>(t * kPerThread + i)];
        issued[t] = weftAllReduce(v, v, 1, weftFloat32, weftSum, comm, stream);
      }
    };
    std::thread other(issue, 1);
    issue(0);
    other.join();
    RANK_CHECK(ctx, issued[0] == weftSuccess && issued[1] == weftSuccess, "issue: %s, %s",
               weftGetErrorString(issued[0]), weftGetErrorString(issued[1]));
    RANK_WEFT(ctx, weftStreamSynchronize(stream));
    weftResult_t async = weftSuccess;
    RANK_WEFT(ctx, weftCommGetAsyncError(comm, &async));
    RANK_CHECK(ctx, async == weftSuccess, "async error %s", weftGetErrorString(async));
    int wrong = 0;
    for (float v : values) wrong += v != 2.0f;
    RANK_CHECK(ctx, wrong == 0, "%d of %zu sums wrong", wrong, values.size());
    RANK_WEFT(ctx, weftStreamDestroy(stream));
    RANK_WEFT(ctx, weftCommDestroy(comm));
    return 0;
  }));
}

namespace {

// Polls weftCommGetAsyncError until it is no longer weftInProgress (or 20 s pass).
weftResult_t pollAsync(weftComm_t comm) {
  weftResult_t state = weftInProgress;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (weftCommGetAsyncError(comm, &state) == weftSuccess && state == weftInProgress &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return state;
}

// 16 all-reduces of ones queued on `stream`, rank 1 issuing them 300 ms after rank 0.
std::vector<std::vector<double>> queueSums(RankContext& ctx, weftComm_t comm, weftStream_t stream) {
  std::vector<std::vector<double>> bufs(16, std::vector<double>(4096, 1.0));
  if (ctx.rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  for (auto& b : bufs) RANK_WEFT(ctx, weftAllReduce(b.data(), b.data(), b.size(), weftFloat64, weftSum, comm, stream));
  return bufs;
}

}  // namespace

TEST_CASE("host streams: finalize lets queued work finish, then takes no calls but destroy", "[streams][multiprocess]") {
  expectAllPassed(runRanks(2, [](RankContext& ctx) {
    weftComm_t comm = rankComm(ctx);
    if (comm == nullptr) return 1;
    RANK_CHECK(ctx, weftCommFinalize(nullptr) == weftInvalidArgument, "finalize of NULL");
    weftStream_t stream = nullptr;
    RANK_WEFT(ctx, weftStreamCreate(&stream));
    auto bufs = queueSums(ctx, comm, stream);
    if (ctx.rank == 0) RANK_CHECK(ctx, weftStreamQuery(stream) == weftInProgress, "rank 1 is asleep, yet the work is done");
    double one = 1;
    RANK_WEFT(ctx, weftGroupStart());
    RANK_WEFT(ctx, weftAllReduce(&one, &one, 1, weftFloat64, weftSum, comm, nullptr));
    RANK_CHECK(ctx, weftCommFinalize(comm) == weftInvalidUsage, "finalize with the open group's call on it");
    RANK_WEFT(ctx, weftGroupEnd());
    RANK_WEFT(ctx, weftCommFinalize(comm));
    RANK_CHECK(ctx, weftStreamQuery(stream) == weftSuccess, "work left on the stream after finalize");
    for (auto& b : bufs) RANK_CHECK(ctx, b[4095] == 2.0, "value %g", b[4095]);
    RANK_CHECK(ctx, one == 2.0, "the group's sum %g", one);
    RANK_CHECK(ctx, weftAllReduce(&one, &one, 1, weftFloat64, weftSum, comm, nullptr) == weftInvalidUsage,
               "a collective after finalize");
    RANK_CHECK(ctx, contains(weftGetLastError(nullptr), "finalized"), "text: %s", weftGetLastError(nullptr));
    weftComm_t part = nullptr;
    RANK_CHECK(ctx, weftCommSplit(comm, 0, ctx.rank, &part, nullptr) == weftInvalidUsage && part == nullptr,
               "a split after finalize");
    RANK_CHECK(ctx, weftCommFinalize(comm) == weftInvalidUsage, "a second finalize");
    weftResult_t async = weftInternalError;
    RANK_WEFT(ctx, weftCommGetAsyncError(comm, &async));
    RANK_CHECK(ctx, async == weftSuccess, "async error %d", async);
    RANK_WEFT(ctx, weftCommDestroy(comm));
    RANK_WEFT(ctx, weftStreamDestroy(stream));
    return 0;
  }));
}

TEST_CASE("host streams: a non-blocking communicator's finalize returns at once and is polled", "[streams][multiprocess]") {
  expectAllPassed(runRanks(2, [](RankContext& ctx) {
    weftConfig_t config = WEFT_CONFIG_INITIALIZER;
    config.blocking = 0;
    weftComm_t comm = nullptr;
    weftResult_t rc = weftCommInitRankConfig(&comm, ctx.nranks, ctx.id, ctx.rank, &config);
    RANK_CHECK(ctx, rc == weftInProgress, "non-blocking init returned %d", rc);
    RANK_CHECK(ctx, pollAsync(comm) == weftSuccess, "init: %s", weftGetLastError(comm));
    weftStream_t stream = nullptr;
    RANK_WEFT(ctx, weftStreamCreate(&stream));
    auto bufs = queueSums(ctx, comm, stream);
    rc = weftCommFinalize(comm);
    RANK_CHECK(ctx, rc == weftInProgress, "finalize returned %d", rc);
    weftResult_t async = weftSuccess;
    RANK_WEFT(ctx, weftCommGetAsyncError(comm, &async));
    if (ctx.rank == 0) RANK_CHECK(ctx, async == weftInProgress, "finalized while rank 1 was asleep: %d", async);
    RANK_CHECK(ctx, pollAsync(comm) == weftSuccess, "finalize: %s", weftGetLastError(comm));
    RANK_CHECK(ctx, weftStreamQuery(stream) == weftSuccess, "work left on the stream after finalize");
    for (auto& b : bufs) RANK_CHECK(ctx, b[4095] == 2.0, "value %g", b[4095]);
    RANK_WEFT(ctx, weftCommDestroy(comm));
    RANK_WEFT(ctx, weftStreamDestroy(stream));
    return 0;
  }));
}

TEST_CASE("host streams: finalize returns the error of queued work that failed", "[streams][multiprocess]") {
  expectAllPassed(runRanks(2, [](RankContext& ctx) {
    weftComm_t comm = rankComm(ctx, 3000);
    if (comm == nullptr) return 1;
    weftStream_t stream = nullptr;
    RANK_WEFT(ctx, weftStreamCreate(&stream));
    std::vector<float> v(ctx.rank == 0 ? 100 : 200, 1.0f);  // mismatched counts
    RANK_WEFT(ctx, weftAllReduce(v.data(), v.data(), v.size(), weftFloat32, weftSum, comm, stream));
    weftResult_t rc = weftCommFinalize(comm);
    RANK_CHECK(ctx, rc != weftSuccess && rc != weftInProgress, "finalize returned %d", rc);
    RANK_CHECK(ctx, contains(weftGetLastError(nullptr), "weftCommFinalize: an operation issued before it failed") &&
                        contains(weftGetLastError(nullptr), "weftAllReduce"),
               "text: %s", weftGetLastError(nullptr));
    const weftResult_t streamError = weftStreamQuery(stream);
    RANK_CHECK(ctx, streamError == rc, "the stream's error %d, finalize's %d", streamError, rc);
    RANK_WEFT(ctx, weftCommDestroy(comm));
    RANK_WEFT(ctx, weftStreamDestroy(stream));
    return 0;
  }));
}
