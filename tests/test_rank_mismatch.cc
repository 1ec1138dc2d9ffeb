// Ranks that disagree with each other about a call: different settings, counts, collectives or
// operators, or one rank that never makes the call. Every rank gets an error within its
// deadline, never a hang or another call's data. Ranks are real processes.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "multiprocess.h"

using namespace weft::test;

TEST_CASE("ranks that disagree: ranks with different tuning settings fail init, naming them", "[mismatch]") {
  // Different chunk sizes (or forced algorithms) make the ranks' schedules for one call differ:
  // a size mismatch at best, a hang or mixed-up data at worst; different stream counts leave a
  // pair waiting for a stream that never comes. Init refuses them on every rank.
  // 512K is the socket default but not shared memory's, so setting it differs from not.
  const std::pair<const char*, const char*> settings[] = {
      {"WEFT_CHUNK_BYTES", "64K"}, {"WEFT_CHUNK_BYTES", "512K"}, {"WEFT_SOCKET_NSTREAMS", "4"}};
  for (auto [name, value] : settings) {
    DYNAMIC_SECTION(name << "=" << value << " on one rank") {
      expectAllPassed(runRanks(3, [name, value](RankContext& ctx) {
        if (ctx.rank == 2) setenv(name, value, 1);
        weftConfig_t config = WEFT_CONFIG_INITIALIZER;
        config.timeoutMs = 20000;
        weftComm_t comm = nullptr;
        weftResult_t rc = weftCommInitRankConfig(&comm, ctx.nranks, ctx.id, ctx.rank, &config);
        const std::string why = weftGetLastError(nullptr);
        RANK_CHECK(ctx, rc == weftInvalidUsage, "init with different settings returned %s", weftGetErrorString(rc));
        RANK_CHECK(ctx, why.find(name) != std::string::npos, "the error does not say what: %s", why.c_str());
        RANK_CHECK(ctx, comm == nullptr, "a communicator was made");
        return 0;
      }));
    }
  }
}

TEST_CASE("ranks that disagree: WEFT_TRANSPORT=shm beside a rank with shared memory disabled fails init on both",
          "[mismatch]") {
  for (const char* disable : {"WEFT_TRANSPORT=socket", "WEFT_SHM_DISABLE=1"}) {
    DYNAMIC_SECTION(disable << " on rank 1") {
      expectAllPassed(runRanks(2, [disable](RankContext& ctx) {
        if (ctx.rank == 0) setenv("WEFT_TRANSPORT", "shm", 1);
        if (ctx.rank == 1) putenv(const_cast<char*>(disable));
        weftConfig_t config = WEFT_CONFIG_INITIALIZER;
        config.timeoutMs = 20000;
        weftComm_t comm = nullptr;
        weftResult_t rc = weftCommInitRankConfig(&comm, ctx.nranks, ctx.id, ctx.rank, &config);
        const char* why = weftGetLastError(nullptr);
        RANK_CHECK(ctx, rc == weftInvalidUsage, "init returned %s", weftGetErrorString(rc));
        RANK_CHECK(ctx, contains(why, "rank 0") && contains(why, "WEFT_TRANSPORT=shm") && contains(why, "rank 1") &&
                            contains(why, "shared memory disabled"),
                   "the error does not say who and why: %s", why);
        RANK_CHECK(ctx, comm == nullptr, "a communicator was made");
        return 0;
      }));
    }
  }
}

TEST_CASE("ranks that disagree: a peer that skips a call is a weftTimeout naming it, through the executor and the arena",
          "[mismatch]") {
  expectAllPassed(runRanks(2, [](RankContext& ctx) {
    weftComm_t comms[2] = {rankComm(ctx, 2000), nullptr};  // one for each case: a timeout fails it
    if (comms[0] == nullptr) return 1;
    RANK_WEFT(ctx, weftCommSplit(comms[0], 0, ctx.rank, &comms[1], nullptr));
    if (comms[1] == nullptr) return 1;
    const size_t counts[2] = {size_t{1} << 18, 1};  // 1 MiB: the executor's ring; 4 bytes: the arena
    std::vector<float> v(counts[0], 1.0f);
    for (int c = 0; c < 2; ++c) {  // both connected first
      RANK_WEFT(ctx, weftAllReduce(v.data(), v.data(), counts[c], weftFloat32, weftSum, comms[c], nullptr));
    }
    if (ctx.rank == 0) {
      for (int c = 0; c < 2; ++c) {
        const weftResult_t rc = weftAllReduce(v.data(), v.data(), counts[c], weftFloat32, weftSum, comms[c], nullptr);
        RANK_CHECK(ctx, rc == weftTimeout && contains(weftGetLastError(comms[c]), "timed out after 2000 ms") &&
                            contains(weftGetLastError(comms[c]), "rank 1"),
                   "%zu floats: returned %d: %s", counts[c], rc, weftGetLastError(comms[c]));
      }
    } else {
      // Alive, connected and silent well past both of rank 0's deadlines (4 s in all), so that
      // rank 0 sees silence, not a hang-up.
      std::this_thread::sleep_for(std::chrono::milliseconds(8000));
    }
    for (weftComm_t comm : comms) (void)weftCommAbort(comm);
    return 0;
  }));
}

TEST_CASE("ranks that disagree: a rank waiting on a peer that went on to a small call through the arena is told at once",
          "[mismatch]") {
  expectAllPassed(runRanks(2, [](RankContext& ctx) {
    weftComm_t comm = rankComm(ctx, 20000);
    if (comm == nullptr) return 1;
    float x = 1;
    RANK_WEFT(ctx, weftAllReduce(&x, &x, 1, weftFloat32, weftSum, comm, nullptr));  // connected, arena made
    const auto start = std::chrono::steady_clock::now();
    if (ctx.rank == 0) {
      // Skips the reduce to rank 1 and goes on to a small all-reduce, which the arena serves.
      const weftResult_t rc = weftAllReduce(&x, &x, 1, weftFloat32, weftSum, comm, nullptr);
      RANK_CHECK(ctx, rc != weftSuccess, "an all-reduce met by a reduce succeeded");
    } else {
      std::vector<float> v(4096, 1.0f);  // the executor's, not the arena's
      const weftResult_t rc = weftReduce(v.data(), v.data(), v.size(), weftFloat32, weftSum, 1, comm, nullptr);
      const char* why = weftGetLastError(comm);
      RANK_CHECK(ctx, rc == weftInvalidUsage && contains(why, "rank 0") && contains(why, "later collective call"),
                 "returned %s: %s", weftGetErrorString(rc), why);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    RANK_CHECK(ctx, seconds < 10, "the mismatch took %.1f s to show (the timeout is 20 s)", seconds);
    (void)weftCommAbort(comm);
    return 0;
  }));
}

TEST_CASE("ranks that disagree: mismatched counts across ranks end in an error, not a hang", "[mismatch]") {
  expectAllPassed(runRanks(2, [](RankContext& ctx) {
    weftComm_t comm = rankComm(ctx, 3000);
    if (comm == nullptr) return 1;
    size_t count = ctx.rank == 0 ? 100 : 1000;
    std::vector<float> v(count + 16, 1.0f);
    weftResult_t rc = weftAllReduce(v.data(), v.data(), count, weftFloat32, weftSum, comm, nullptr);
    RANK_CHECK(ctx, rc != weftSuccess, "mismatched counts succeeded");
    for (size_t i = count; i < v.size(); ++i) RANK_CHECK(ctx, v[i] == 1.0f, "wrote past the buffer at %zu", i);
    // The communicator stays failed with the first error.
    float x = 1;
    RANK_CHECK(ctx, weftAllReduce(&x, &x, 1, weftFloat32, weftSum, comm, nullptr) != weftSuccess,
               "a failed communicator ran another collective");
    (void)weftCommAbort(comm);
    return 0;
  }));
}

TEST_CASE("ranks that disagree: ranks in different collectives of equal size get an error, not each other's data",
          "[mismatch]") {
  expectAllPassed(runRanks(2, [](RankContext& ctx) {
    weftComm_t comm = rankComm(ctx, 3000);
    if (comm == nullptr) return 1;
    // One message each way of 64 bytes on both ranks: only the call signature differs.
    std::vector<float> send(32, 1.0f), recv(32, 0.0f);
    weftResult_t rc = ctx.rank == 0 ? weftAllGather(send.data(), recv.data(), 16, weftFloat32, comm, nullptr)
                                    : weftAlltoAll(send.data(), recv.data(), 16, weftFloat32, comm, nullptr);
    RANK_CHECK(ctx, rc != weftSuccess, "mismatched collectives succeeded");
    RANK_CHECK(ctx, rc == weftTimeout || contains(weftGetLastError(comm), "mismatched calls"), "error: %s",
               weftGetLastError(comm));
    (void)weftCommAbort(comm);
    return 0;
  }));
}

TEST_CASE("ranks that disagree: a receive met by a later call's message names it as another call, with both sizes",
          "[mismatch]") {
  // Rank 0 sends 0 elements (nothing goes out, as in NCCL) and all-reduces; rank 1's receive
  // of 4 elements meets the all-reduce's first message. That is a message of another call, not
  // a send of the wrong size, which the error used to say.
  for (const char* transport : {"shm", "socket"}) {
    DYNAMIC_SECTION("over " << transport) {
      expectAllPassed(runRanks(2, [transport](RankContext& ctx) {
        setenv("WEFT_TRANSPORT", transport, 1);
        weftComm_t comm = rankComm(ctx, 3000);
        if (comm == nullptr) return 1;
        std::vector<int32_t> v(size_t{1} << 18, 1);  // 1 MiB: through the executor, not the arena
        if (ctx.rank == 0) {
          RANK_WEFT(ctx, weftSend(v.data(), 0, weftInt32, 1, comm, nullptr));
          RANK_CHECK(ctx, weftAllReduce(v.data(), v.data(), v.size(), weftInt32, weftSum, comm, nullptr) != weftSuccess,
                     "the all-reduce succeeded alone");
        } else {
          const weftResult_t rc = weftRecv(v.data(), 4, weftInt32, 0, comm, nullptr);
          const char* why = weftGetLastError(comm);
          RANK_CHECK(ctx, rc == weftInvalidUsage && contains(why, "mismatched calls") && contains(why, "(16 bytes)") &&
                              !contains(why, "size mismatch"),
                     "returned %d: %s", rc, why);
        }
        (void)weftCommAbort(comm);
        return 0;
      }));
    }
  }
}

TEST_CASE("ranks that disagree: Avg on one rank and Sum on the other is an error, on the executor too", "[mismatch]") {
  // Half Avg divides the inputs first and then sums: the call must still be told from a Sum.
  // 50000 elements: past the arena, through the executor's schedule.
  expectAllPassed(runRanks(2, [](RankContext& ctx) {
    weftComm_t comm = rankComm(ctx, 3000);
    if (comm == nullptr) return 1;
    std::vector<uint16_t> data(50000, 0x3c00);  // 1.0
    weftResult_t rc = weftAllReduce(data.data(), data.data(), data.size(), weftFloat16,
                                    ctx.rank == 0 ? weftAvg : weftSum, comm, nullptr);
    RANK_CHECK(ctx, rc != weftSuccess, "Avg against Sum succeeded");
    (void)weftCommAbort(comm);
    return 0;
  }));
}

TEST_CASE("ranks that disagree: a rank that comes after the rendezvous failed is told why, not left to time out",
          "[mismatch][bootstrap]") {
  // Rank 1 miscounts the ranks, which fails the rendezvous for ranks 0 and 1; rank 2 comes
  // after that, while rank 0's process (the root's) lives on. It must hear the same failure
  // rather than find the root's port closed and retry until its 20 s timeout.
  const std::string flag = "/tmp/weft-test-latecomer-" + std::to_string(getpid());
  auto raise = [&](int rank) { close(open((flag + "-" + std::to_string(rank)).c_str(), O_CREAT | O_WRONLY, 0600)); };
  auto awaitRaised = [&](int rank) {  // up to 20 s
    for (int i = 0; i < 2000 && access((flag + "-" + std::to_string(rank)).c_str(), F_OK) != 0; ++i) usleep(10000);
  };
  expectAllPassed(runRanks(3, [&](RankContext& ctx) {
    if (ctx.rank == 2) awaitRaised(1);  // rank 1 has heard the failure
    weftConfig_t config = WEFT_CONFIG_INITIALIZER;
    config.timeoutMs = 20000;
    weftComm_t comm = nullptr;
    weftResult_t rc = weftCommInitRankConfig(&comm, ctx.rank == 1 ? 4 : 3, ctx.id, ctx.rank, &config);
    const char* why = weftGetLastError(nullptr);
    RANK_CHECK(ctx, rc == weftInvalidUsage && contains(why, "says there are"), "init returned %s: %s",
               weftGetErrorString(rc), why);
    RANK_CHECK(ctx, comm == nullptr, "a communicator was made");
    raise(ctx.rank);
    if (ctx.rank == 0) awaitRaised(2);  // the root lives on until rank 2 has heard
    return 0;
  }));
  for (int rank = 0; rank < 3; ++rank) unlink((flag + "-" + std::to_string(rank)).c_str());
}

TEST_CASE("ranks that disagree: a later rank in the process of ranks told the failure is told it too",
          "[mismatch][bootstrap]") {
  // Ranks 0 and 1 share a process (threads, as group init makes them); rank 1 miscounts, which
  // fails the rendezvous. Rank 2, a later thread of the same process, is no retry of theirs: it
  // must hear the failure, not be sent to connect again to a root that is no more.
  weftUniqueId id;
  REQUIRE(weftGetUniqueId(&id) == weftSuccess);
  auto init = [&id](int rank, int nranks, weftResult_t* rc, std::string* why) {
    weftConfig_t config = WEFT_CONFIG_INITIALIZER;
    config.timeoutMs = 8000;
    weftComm_t comm = nullptr;
    *rc = weftCommInitRankConfig(&comm, nranks, id, rank, &config);
    *why = weftGetLastError(nullptr);
  };
  weftResult_t rc[3];
  std::string why[3];
  std::thread first(init, 0, 3, &rc[0], &why[0]);
  std::thread second(init, 1, 4, &rc[1], &why[1]);
  first.join();
  second.join();
  std::thread(init, 2, 3, &rc[2], &why[2]).join();
  for (int rank = 0; rank < 3; ++rank) {
    INFO("rank " << rank << ": " << weftGetErrorString(rc[rank]) << ": " << why[rank]);
    CHECK(rc[rank] == weftInvalidUsage);
    CHECK(contains(why[rank].c_str(), "says there are"));
  }
}
