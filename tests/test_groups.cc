// Groups, point-to-point patterns, PreMulSum and barrier, across real processes (split and
// init-all: test_split.cc).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "element_codec.h"
#include "multiprocess.h"

using namespace weft::test;

namespace {

// Value j of what rank `from` sends rank `to` in the all-pairs exchanges below.
int32_t message(int from, int to, size_t j) { return from * 100000 + to * 1000 + static_cast<int32_t>(j); }
// Per-pair sizes differ, as in an alltoallv.
size_t pairCount(int from, int to) { return static_cast<size_t>(1 + (from * 7 + to * 3) % 11) * 100; }

}  // namespace

TEST_CASE("groups: all-pairs sends and receives in a different order on every rank", "[groups][multiprocess]") {
  for (int ranks : {2, 3, 5}) {
    DYNAMIC_SECTION(ranks << " ranks") {
      expectAllPassed(runRanks(ranks, [](RankContext& ctx) {
        weftComm_t comm = rankComm(ctx);
        if (comm == nullptr) return 1;
        const int n = ctx.nranks, r = ctx.rank;
        std::vector<std::vector<int32_t>> out(static_cast<size_t>(n)), in(static_cast<size_t>(n));
        for (int p = 0; p < n; ++p) {
          out[static_cast<size_t>(p)].resize(pairCount(r, p));
          for (size_t j = 0; j < out[static_cast<size_t>(p)].size(); ++j) out[static_cast<size_t>(p)][j] = message(r, p, j);
          in[static_cast<size_t>(p)].assign(pairCount(p, r), -1);
        }
        for (int round = 0; round < 3; ++round) {
          RANK_WEFT(ctx, weftGroupStart());
          // Receives in descending peer order on even ranks, all sends first on odd ones.
          auto recvAll = [&] {
            for (int k = 0; k < n; ++k) {
              int p = r % 2 ? k : n - 1 - k;
              RANK_WEFT(ctx, weftRecv(in[static_cast<size_t>(p)].data(), in[static_cast<size_t>(p)].size(), weftInt32, p,
                                      comm, nullptr));
            }
          };
          if (r % 2 == 0) recvAll();
          for (int p = 0; p < n; ++p) {
            RANK_WEFT(ctx, weftSend(out[static_cast<size_t>(p)].data(), out[static_cast<size_t>(p)].size(), weftInt32, p,
                                    comm, nullptr));
          }
          if (r % 2) recvAll();
          RANK_WEFT(ctx, weftGroupEnd());
          for (int p = 0; p < n; ++p) {
            size_t wrong = 0;
            for (size_t j = 0; j < in[static_cast<size_t>(p)].size(); ++j) wrong += in[static_cast<size_t>(p)][j] != message(p, r, j);
            RANK_CHECK(ctx, wrong == 0, "round %d: %zu wrong from rank %d", round, wrong, p);
          }
        }
        RANK_WEFT(ctx, weftCommDestroy(comm));
        return 0;
      }));
    }
  }
}

TEST_CASE("groups: collectives and point-to-point together, nested, on a host stream", "[groups][multiprocess]") {
  expectAllPassed(runRanks(4, [](RankContext& ctx) {
    weftComm_t comm = rankComm(ctx);
    if (comm == nullptr) return 1;
    const int n = ctx.nranks, r = ctx.rank;
    std::vector<float> sum(1000, static_cast<float>(r)), gathered(4 * 10, -1);
    std::vector<float> mine(10, static_cast<float>(r * 10));
    int32_t token = r, fromPrev = -1;
    weftStream_t stream = nullptr;
    RANK_WEFT(ctx, weftStreamCreate(&stream));
    for (weftStream_t s : {static_cast<weftStream_t>(nullptr), stream}) {
      RANK_WEFT(ctx, weftGroupStart());
      RANK_WEFT(ctx, weftAllReduce(sum.data(), sum.data(), sum.size(), weftFloat32, weftSum, comm, s));
      RANK_WEFT(ctx, weftGroupStart());  // nested: only the outermost end issues
      RANK_WEFT(ctx, weftSend(&token, 1, weftInt32, (r + 1) % n, comm, s));
      RANK_WEFT(ctx, weftRecv(&fromPrev, 1, weftInt32, (r + n - 1) % n, comm, s));
      RANK_WEFT(ctx, weftGroupEnd());
      RANK_WEFT(ctx, weftAllGather(mine.data(), gathered.data(), mine.size(), weftFloat32, comm, s));
      RANK_WEFT(ctx, weftGroupEnd());
      if (s != nullptr) RANK_WEFT(ctx, weftStreamSynchronize(s));
    }
    // Two rounds of in-place sums: n * r summed over r, then times n again.
    const float expect = static_cast<float>(n * (n - 1) / 2 * n);
    RANK_CHECK(ctx, sum[0] == expect && sum[999] == expect, "sum %g, want %g", sum[0], expect);
    RANK_CHECK(ctx, fromPrev == (r + n - 1) % n, "token %d", fromPrev);
    for (int b = 0; b < n; ++b) RANK_CHECK(ctx, gathered[static_cast<size_t>(b) * 10 + 9] == b * 10.0f, "block %d", b);
    RANK_WEFT(ctx, weftStreamDestroy(stream));
    RANK_WEFT(ctx, weftCommDestroy(comm));
    return 0;
  }));
}

TEST_CASE("groups: a group over two communicators waits for work queued ahead of it, however long it takes",
          "[groups][multiprocess]") {
  // Rank 0 queues four all-reduces on `a` (timeout 2 s) on a host stream; rank 1 joins each
  // 1.5 s late, so they end one by one, 6 s in all. Rank 0's group of NULL-stream calls on `a`
  // and `b` (timeout 30 s) runs behind them: weftGroupEnd must return only once it has, with
  // the results.
  expectAllPassed(runRanks(2, [](RankContext& ctx) {
    weftConfig_t config = WEFT_CONFIG_INITIALIZER;
    config.timeoutMs = 2000;
    weftComm_t a = nullptr, b = nullptr;
    RANK_WEFT(ctx, weftCommInitRankConfig(&a, ctx.nranks, ctx.id, ctx.rank, &config));
    if (a == nullptr) return 1;
    weftUniqueId second{};
    if (ctx.rank == 0) RANK_WEFT(ctx, weftGetUniqueId(&second));
    RANK_WEFT(ctx, weftBcast(&second, sizeof(second), weftUint8, 0, a, nullptr));
    config.timeoutMs = 30000;
    RANK_WEFT(ctx, weftCommInitRankConfig(&b, ctx.nranks, second, ctx.rank, &config));
    if (b == nullptr) return 1;
    RANK_WEFT(ctx, weftBarrier(b, nullptr));  // connected before rank 1 falls behind
    weftStream_t stream = nullptr;
    RANK_WEFT(ctx, weftStreamCreate(&stream));
    std::vector<int32_t> queued(16, 1), x(16, ctx.rank + 1), y(16, 10 * (ctx.rank + 1));
    for (int i = 0; i < 4; ++i) {
      if (ctx.rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      RANK_WEFT(ctx, weftAllReduce(queued.data(), queued.data(), queued.size(), weftInt32, weftSum, a,
                                   ctx.rank == 0 ? stream : nullptr));
    }
    RANK_WEFT(ctx, weftGroupStart());
    RANK_WEFT(ctx, weftAllReduce(x.data(), x.data(), x.size(), weftInt32, weftSum, a, nullptr));
    RANK_WEFT(ctx, weftAllReduce(y.data(), y.data(), y.size(), weftInt32, weftSum, b, nullptr));
    RANK_WEFT(ctx, weftGroupEnd());
    RANK_CHECK(ctx, x[15] == 3 && y[0] == 30, "x %d y %d (expected 3 and 30) when weftGroupEnd returned", x[15], y[0]);
    RANK_WEFT(ctx, weftStreamSynchronize(stream));
    RANK_CHECK(ctx, queued[0] == 16, "queued %d (expected 16)", queued[0]);
    RANK_WEFT(ctx, weftStreamDestroy(stream));
    RANK_WEFT(ctx, weftCommDestroy(b));
    RANK_WEFT(ctx, weftCommDestroy(a));
    return 0;
  }));
}

TEST_CASE("groups: two communicators on one host stream, listed in a different order on each rank",
          "[groups][multiprocess]") {
  // Messages too large to go eagerly: each rank's first batch waits for its peer's part in the
  // other communicator's batch, which must not be queued behind it. Then the same with
  // collectives, and a later call on the stream waits for the whole group.
  expectAllPassed(runRanks(2, [](RankContext& ctx) {
    weftComm_t c = rankComm(ctx);
    if (c == nullptr) return 1;
    weftComm_t d = nullptr;
    RANK_WEFT(ctx, weftCommSplit(c, 0, ctx.rank, &d, nullptr));
    weftStream_t stream = nullptr;
    RANK_WEFT(ctx, weftStreamCreate(&stream));
    const int peer = 1 - ctx.rank;
    constexpr size_t kCount = size_t{1} << 20;
    std::vector<float> toC(kCount, static_cast<float>(ctx.rank + 1)), toD(kCount, static_cast<float>(ctx.rank + 10));
    std::vector<float> fromC(kCount, 0.0f), fromD(kCount, 0.0f);
    RANK_WEFT(ctx, weftGroupStart());
    if (ctx.rank == 0) {
      RANK_WEFT(ctx, weftSend(toC.data(), kCount, weftFloat32, peer, c, stream));
      RANK_WEFT(ctx, weftRecv(fromD.data(), kCount, weftFloat32, peer, d, stream));
    } else {
      RANK_WEFT(ctx, weftSend(toD.data(), kCount, weftFloat32, peer, d, stream));
      RANK_WEFT(ctx, weftRecv(fromC.data(), kCount, weftFloat32, peer, c, stream));
    }
    RANK_WEFT(ctx, weftGroupEnd());
    RANK_WEFT(ctx, weftStreamSynchronize(stream));
    const bool delivered = ctx.rank == 0 ? fromD[kCount - 1] == 11.0f : fromC[kCount - 1] == 1.0f;
    RANK_CHECK(ctx, delivered, "point-to-point: received %g / %g", fromC[kCount - 1], fromD[kCount - 1]);

    std::vector<float> sum(kCount, 1.0f), gathered(2 * kCount, 0.0f), after(4, 1.0f);
    RANK_WEFT(ctx, weftGroupStart());
    for (int k = 0; k < 2; ++k) {
      if ((k == 0) == (ctx.rank == 0)) {
        RANK_WEFT(ctx, weftAllReduce(sum.data(), sum.data(), kCount, weftFloat32, weftSum, c, stream));
      } else {
        RANK_WEFT(ctx, weftAllGather(toD.data(), gathered.data(), kCount, weftFloat32, d, stream));
      }
    }
    RANK_WEFT(ctx, weftGroupEnd());
    RANK_WEFT(ctx, weftAllReduce(after.data(), after.data(), after.size(), weftFloat32, weftSum, c, stream));
    RANK_WEFT(ctx, weftStreamSynchronize(stream));
    RANK_CHECK(ctx, sum[kCount - 1] == 2.0f && gathered[0] == 10.0f && gathered[2 * kCount - 1] == 11.0f &&
                        after[0] == 2.0f,
               "collectives: sum %g, gathered %g %g, after %g", sum[kCount - 1], gathered[0], gathered[2 * kCount - 1],
               after[0]);
    RANK_WEFT(ctx, weftStreamDestroy(stream));
    RANK_WEFT(ctx, weftCommDestroy(d));
    RANK_WEFT(ctx, weftCommDestroy(c));
    return 0;
  }));
}

TEST_CASE("groups: a stream destroyed before the group ends fails it whole", "[groups][multiprocess]") {
  expectAllPassed(runRanks(2, [](RankContext& ctx) {
    weftComm_t c = rankComm(ctx);
    if (c == nullptr) return 1;
    weftComm_t d = nullptr;
    RANK_WEFT(ctx, weftCommSplit(c, 0, ctx.rank, &d, nullptr));
    weftStream_t kept = nullptr, destroyed = nullptr;
    RANK_WEFT(ctx, weftStreamCreate(&kept));
    RANK_WEFT(ctx, weftStreamCreate(&destroyed));
    std::vector<int32_t> x(8, 1), y(8, 1);
    RANK_WEFT(ctx, weftGroupStart());
    RANK_WEFT(ctx, weftAllReduce(x.data(), x.data(), x.size(), weftInt32, weftSum, c, kept));
    RANK_WEFT(ctx, weftAllReduce(y.data(), y.data(), y.size(), weftInt32, weftSum, d, destroyed));
    RANK_WEFT(ctx, weftStreamDestroy(destroyed));
    const weftResult_t rc = weftGroupEnd();
    RANK_CHECK(ctx, rc == weftInvalidArgument, "weftGroupEnd returned %d", rc);
    RANK_CHECK(ctx, std::string(weftGetLastError(nullptr)).find("nothing was issued") != std::string::npos,
               "last error: %s", weftGetLastError(nullptr));
    RANK_WEFT(ctx, weftStreamSynchronize(kept));
    RANK_CHECK(ctx, x[0] == 1 && y[0] == 1, "issued in part: x %d y %d", x[0], y[0]);
    // Both communicators are still in step.
    RANK_WEFT(ctx, weftAllReduce(x.data(), x.data(), x.size(), weftInt32, weftSum, c, kept));
    RANK_WEFT(ctx, weftAllReduce(y.data(), y.data(), y.size(), weftInt32, weftSum, d, nullptr));
    RANK_WEFT(ctx, weftStreamSynchronize(kept));
    RANK_CHECK(ctx, x[0] == 2 && y[0] == 2, "after: x %d y %d", x[0], y[0]);
    RANK_WEFT(ctx, weftStreamDestroy(kept));
    RANK_WEFT(ctx, weftCommDestroy(d));
    RANK_WEFT(ctx, weftCommDestroy(c));
    return 0;
  }));
}

TEST_CASE("groups: ranks that group different point-to-point calls with the same collectives", "[groups][multiprocess]") {
  // Ranks 0 and 1 also swap a token inside the group (except in round 1); rank 2 has only the
  // collectives. In round 3 rank 2's group is the one small all-reduce, which goes through the
  // shared-memory arena: deciding that per group rather than per collective sent ranks 0 and 1
  // to the executor and rank 2 to the arena, and all three waited for the timeout. Round 2's
  // all-reduce is too large for the arena: it runs as one schedule with the token, which must
  // not take the place of a collective's message.
  const char* transport = GENERATE("shm", "socket");
  setenv("WEFT_TRANSPORT", transport, 1);
  INFO("over " << transport);
  expectAllPassed(runRanks(3, [](RankContext& ctx) {
    weftConfig_t config = WEFT_CONFIG_INITIALIZER;
    config.timeoutMs = 20000;
    weftComm_t comm = nullptr;
    RANK_WEFT(ctx, weftCommInitRankConfig(&comm, ctx.nranks, ctx.id, ctx.rank, &config));
    if (comm == nullptr) return 1;
    const int n = ctx.nranks, r = ctx.rank;
    for (int round = 0; round < 4; ++round) {
      const size_t count = round == 2 ? 300000 : 1000;
      const bool gather = round != 3;
      std::vector<float> sum(count, static_cast<float>(r + round)), gathered(static_cast<size_t>(n) * 10, -1);
      std::vector<float> mine(10, static_cast<float>(r * 10 + round));
      int32_t token = r + round, other = -1;
      RANK_WEFT(ctx, weftGroupStart());
      if (r < 2 && round != 1) RANK_WEFT(ctx, weftSend(&token, 1, weftInt32, 1 - r, comm, nullptr));
      RANK_WEFT(ctx, weftAllReduce(sum.data(), sum.data(), sum.size(), weftFloat32, weftSum, comm, nullptr));
      if (gather) RANK_WEFT(ctx, weftAllGather(mine.data(), gathered.data(), mine.size(), weftFloat32, comm, nullptr));
      if (r < 2 && round != 1) RANK_WEFT(ctx, weftRecv(&other, 1, weftInt32, 1 - r, comm, nullptr));
      RANK_WEFT(ctx, weftGroupEnd());
      const float expect = static_cast<float>(n * (n - 1) / 2 + n * round);
      RANK_CHECK(ctx, sum[0] == expect && sum[count - 1] == expect, "round %d: sum %g, want %g", round, sum[0], expect);
      for (int b = 0; gather && b < n; ++b) {
        RANK_CHECK(ctx, gathered[static_cast<size_t>(b) * 10 + 9] == static_cast<float>(b * 10 + round), "round %d: block %d",
                   round, b);
      }
      if (r < 2 && round != 1) RANK_CHECK(ctx, other == 1 - r + round, "round %d: token %d", round, other);
    }
    RANK_WEFT(ctx, weftCommDestroy(comm));
    return 0;
  }));
  unsetenv("WEFT_TRANSPORT");
}

TEST_CASE("groups: a group of 70000 sends and receives keeps every operation's own buffers", "[groups][multiprocess]") {
  // Past 32768 operations a 16-bit buffer number wrapped onto operation 0's buffers (and the
  // scratch), and past 65536 a 16-bit operation number onto operation 0's tag.
  constexpr int kMessages = 35000;
  expectAllPassed(runRanks(2, [](RankContext& ctx) {
    weftComm_t comm = rankComm(ctx);
    if (comm == nullptr) return 1;
    const int peer = 1 - ctx.rank;
    std::vector<int32_t> out(kMessages), in(kMessages, -1);
    for (int i = 0; i < kMessages; ++i) out[static_cast<size_t>(i)] = ctx.rank * kMessages + i;
    RANK_WEFT(ctx, weftGroupStart());
    for (size_t i = 0; i < out.size(); ++i) {
      RANK_WEFT(ctx, weftSend(&out[i], 1, weftInt32, peer, comm, nullptr));
      RANK_WEFT(ctx, weftRecv(&in[i], 1, weftInt32, peer, comm, nullptr));
    }
    RANK_WEFT(ctx, weftGroupEnd());
    int wrong = 0, first = -1;
    for (int i = 0; i < kMessages; ++i) {
      if (in[static_cast<size_t>(i)] != peer * kMessages + i && wrong++ == 0) first = i;
    }
    RANK_CHECK(ctx, wrong == 0, "%d of %d messages wrong, the first at %d (%d)", wrong, kMessages, first,
               first < 0 ? 0 : in[static_cast<size_t>(first)]);
    RANK_WEFT(ctx, weftCommDestroy(comm));
    return 0;
  }));
}

TEST_CASE("groups: calls that write each other's memory are refused whole, calls that only read it share it",
          "[groups][multiprocess]") {
  // A ring shift in place (send the buffer on, receive into it) raced: the receive overwrote
  // what the send had not sent yet, and the group returned success with wrong data.
  expectAllPassed(runRanks(3, [](RankContext& ctx) {
    weftComm_t comm = rankComm(ctx);
    if (comm == nullptr) return 1;
    const int next = (ctx.rank + 1) % ctx.nranks, prev = (ctx.rank + ctx.nranks - 1) % ctx.nranks;
    constexpr size_t kCount = size_t{1} << 20;
    std::vector<int32_t> buf(2 * kCount, ctx.rank), other(kCount, -1);
    const std::vector<int32_t> before = buf;
    struct Case {
      const char* what;
      int32_t* send;
      int32_t* recv;
    } refused[] = {{"in place", buf.data(), buf.data()},
                   {"overlapping by one element", buf.data() + kCount - 1, buf.data()},
                   {"overlapping at the end", buf.data(), buf.data() + kCount - 1}};
    for (const Case& c : refused) {
      RANK_WEFT(ctx, weftGroupStart());
      RANK_WEFT(ctx, weftSend(c.send, kCount, weftInt32, next, comm, nullptr));
      RANK_WEFT(ctx, weftRecv(c.recv, kCount, weftInt32, prev, comm, nullptr));
      const weftResult_t rc = weftGroupEnd();
      RANK_CHECK(ctx, rc == weftInvalidArgument && contains(weftGetLastError(comm), "share memory"), "%s: %d: %s",
                 c.what, rc, weftGetLastError(comm));
      RANK_CHECK(ctx, buf == before, "%s: the buffer changed", c.what);
    }
    // Two receives into one buffer race too.
    RANK_WEFT(ctx, weftGroupStart());
    RANK_WEFT(ctx, weftRecv(other.data(), kCount, weftInt32, prev, comm, nullptr));
    RANK_WEFT(ctx, weftRecv(other.data(), kCount, weftInt32, next, comm, nullptr));
    RANK_CHECK(ctx, weftGroupEnd() == weftInvalidArgument, "two receives into one buffer");
    // One buffer sent to both neighbours is only read: allowed, and the communicator is usable.
    RANK_WEFT(ctx, weftGroupStart());
    RANK_WEFT(ctx, weftSend(buf.data(), kCount, weftInt32, next, comm, nullptr));
    RANK_WEFT(ctx, weftSend(buf.data(), kCount, weftInt32, prev, comm, nullptr));
    RANK_WEFT(ctx, weftRecv(other.data(), kCount, weftInt32, prev, comm, nullptr));
    RANK_WEFT(ctx, weftRecv(buf.data() + kCount, kCount, weftInt32, next, comm, nullptr));
    RANK_WEFT(ctx, weftGroupEnd());
    RANK_CHECK(ctx, other[0] == prev && other[kCount - 1] == prev && buf[kCount] == next && buf[2 * kCount - 1] == next,
               "received %d and %d", other[0], buf[kCount]);
    RANK_WEFT(ctx, weftCommDestroy(comm));
    return 0;
  }));
}

TEST_CASE("groups: weftGroupSimulateEnd prices a group, as the tuner does, and issues none of it",
          "[groups][multiprocess]") {
  expectAllPassed(runRanks(2, [](RankContext& ctx) {
    weftComm_t comm = rankComm(ctx, 10000);  // a call issued after all would fail in 10 s, not pass
    if (comm == nullptr) return 1;
    constexpr size_t kSmall = size_t{1} << 18, kLarge = size_t{1} << 24;  // 1 MiB and 64 MiB of float
    std::vector<float> send(kLarge, static_cast<float>(ctx.rank + 1)), recv(kLarge, -7.0f);
    auto simulate = [&](std::initializer_list<size_t> counts) {
      weftSimInfo_t info = WEFT_SIM_INFO_INITIALIZER;
      RANK_WEFT(ctx, weftGroupStart());
      size_t at = 0;  // each call writes its own part of recv (a group refuses calls that share it)
      for (size_t count : counts) {
        RANK_WEFT(ctx, weftAllReduce(send.data(), recv.data() + at, count, weftFloat32, weftSum, comm, nullptr));
        at += count;
      }
      RANK_WEFT(ctx, weftGroupSimulateEnd(&info));
      return info.estimatedTime;
    };
    auto untouched = [&] { return std::all_of(recv.begin(), recv.end(), [](float v) { return v == -7.0f; }); };

    const float one = simulate({kSmall}), two = simulate({kSmall, kSmall}), large = simulate({kLarge});
    RANK_CHECK(ctx, std::isfinite(one) && one > 0, "1 MiB all-reduce priced at %g us", one);
    RANK_CHECK(ctx, std::abs(two - 2 * one) <= 1e-3f * two, "two calls %g us, one %g us: not their sum", two, one);
    RANK_CHECK(ctx, large > 16 * one, "64 MiB priced at %g us, 1 MiB at %g us", large, one);
    RANK_CHECK(ctx, untouched(), "a simulated group wrote the receive buffer");

    // Nothing is waited for: rank 0 prices a send that rank 1 never receives.
    if (ctx.rank == 0) {
      weftSimInfo_t info = WEFT_SIM_INFO_INITIALIZER;
      RANK_WEFT(ctx, weftGroupStart());
      RANK_WEFT(ctx, weftSend(send.data(), kSmall, weftFloat32, 1, comm, nullptr));
      RANK_WEFT(ctx, weftGroupSimulateEnd(&info));
      RANK_CHECK(ctx, info.estimatedTime > 0, "a send priced at %g us", info.estimatedTime);
    }

    // Nested: the inner end closes its level and leaves simInfo alone.
    weftSimInfo_t inner = WEFT_SIM_INFO_INITIALIZER, outer = WEFT_SIM_INFO_INITIALIZER;
    RANK_WEFT(ctx, weftGroupStart());
    RANK_WEFT(ctx, weftGroupStart());
    RANK_WEFT(ctx, weftAllReduce(send.data(), recv.data(), kSmall, weftFloat32, weftSum, comm, nullptr));
    RANK_WEFT(ctx, weftGroupSimulateEnd(&inner));
    RANK_WEFT(ctx, weftGroupSimulateEnd(&outer));
    RANK_CHECK(ctx, std::isnan(inner.estimatedTime) && outer.estimatedTime == one, "inner %g, outer %g, alone %g",
               inner.estimatedTime, outer.estimatedTime, one);

    // A bad simInfo leaves the group open with its calls: weftGroupEnd then runs them.
    weftSimInfo_t bad = WEFT_SIM_INFO_INITIALIZER;
    bad.magic = 0;
    RANK_WEFT(ctx, weftGroupStart());
    RANK_WEFT(ctx, weftAllReduce(send.data(), recv.data(), kSmall, weftFloat32, weftSum, comm, nullptr));
    RANK_CHECK(ctx, weftGroupSimulateEnd(nullptr) == weftInvalidArgument, "NULL simInfo");
    RANK_CHECK(ctx, weftGroupSimulateEnd(&bad) == weftInvalidArgument, "simInfo without its magic");
    RANK_CHECK(ctx, contains(weftGetLastError(nullptr), "WEFT_SIM_INFO_INITIALIZER"), "text: %s", weftGetLastError(nullptr));
    RANK_WEFT(ctx, weftGroupEnd());
    RANK_CHECK(ctx, recv[0] == 3.0f && recv[kSmall - 1] == 3.0f && recv[kSmall] == -7.0f, "the group ran: %g %g %g",
               recv[0], recv[kSmall - 1], recv[kSmall]);

    // It refuses what weftGroupEnd refuses, with the same words, and needs an open group.
    weftSimInfo_t info = WEFT_SIM_INFO_INITIALIZER;
    RANK_WEFT(ctx, weftGroupStart());
    RANK_WEFT(ctx, weftRecv(recv.data(), kSmall, weftFloat32, 1 - ctx.rank, comm, nullptr));
    RANK_WEFT(ctx, weftRecv(recv.data(), kSmall, weftFloat32, 1 - ctx.rank, comm, nullptr));
    RANK_CHECK(ctx, weftGroupSimulateEnd(&info) == weftInvalidArgument && std::isnan(info.estimatedTime),
               "two receives into one buffer: %s", weftGetLastError(comm));
    RANK_CHECK(ctx, contains(weftGetLastError(comm), "weftGroupSimulateEnd: call 0 (recv) and call 1 (recv)"), "text: %s",
               weftGetLastError(comm));
    RANK_CHECK(ctx, weftGroupSimulateEnd(&info) == weftInvalidUsage, "no group open");

    RANK_WEFT(ctx, weftAllReduce(send.data(), recv.data(), kSmall, weftFloat32, weftSum, comm, nullptr));
    RANK_CHECK(ctx, recv[0] == 3.0f, "the communicator still works: %g", recv[0]);
    RANK_WEFT(ctx, weftCommDestroy(comm));
    return 0;
  }));
}

TEST_CASE("PreMulSum: every reducing collective, host-immediate and pointer scalars", "[groups][multiprocess]") {
  expectAllPassed(runRanks(3, [](RankContext& ctx) {
    weftComm_t comm = rankComm(ctx);
    if (comm == nullptr) return 1;
    const int n = ctx.nranks, r = ctx.rank;
    // Each rank scales by (rank + 1): the result is sum over ranks of (rank + 1) * input.
    for (weftDataType_t type : {weftFloat32, weftInt32, weftBfloat16, weftFloat64, weftUint8}) {
      std::vector<char> scalar(8);
      storeValue(scalar.data(), 0, type, r + 1);
      for (weftScalarResidence_t residence : {weftScalarHostImmediate, weftScalarDevice}) {
        weftRedOp_t op;
        RANK_WEFT(ctx, weftRedOpCreatePreMulSum(&op, scalar.data(), type, residence, comm));
        const size_t count = 37;
        std::vector<char> send(count * static_cast<size_t>(n) * typeSize(type)), recv(send.size());
        for (size_t i = 0; i < count * static_cast<size_t>(n); ++i) storeValue(send.data(), i, type, (i + r) % 4);
        auto expected = [&](size_t i) {
          double v = 0;
          for (int q = 0; q < n; ++q) v += (q + 1) * static_cast<double>((i + static_cast<size_t>(q)) % 4);
          return v;
        };
        auto value = [&](const char* buf, size_t i) {
          if (isFloatType(type)) return loadFloat(buf, i, type);
          return static_cast<double>(loadBits(buf, i, type));
        };
        size_t wrong = 0;
        RANK_WEFT(ctx, weftAllReduce(send.data(), recv.data(), count, type, op, comm, nullptr));
        for (size_t i = 0; i < count; ++i) wrong += value(recv.data(), i) != expected(i);
        RANK_WEFT(ctx, weftReduce(send.data(), recv.data(), count, type, op, 1, comm, nullptr));
        if (r == 1) {
          for (size_t i = 0; i < count; ++i) wrong += value(recv.data(), i) != expected(i);
        }
        RANK_WEFT(ctx, weftReduceScatter(send.data(), recv.data(), count, type, op, comm, nullptr));
        for (size_t j = 0; j < count; ++j) wrong += value(recv.data(), j) != expected(static_cast<size_t>(r) * count + j);
        RANK_CHECK(ctx, wrong == 0, "type %d residence %d: %zu wrong", type, residence, wrong);
        // The caller's input is never scaled in place.
        RANK_CHECK(ctx, value(send.data(), 1) == static_cast<double>((1 + r) % 4), "sendbuff changed");
        RANK_WEFT(ctx, weftRedOpDestroy(op, comm));
      }
    }
    // A pointer scalar is read when the collective runs, not when the operator is made.
    float scale = 0;
    weftRedOp_t op;
    RANK_WEFT(ctx, weftRedOpCreatePreMulSum(&op, &scale, weftFloat32, weftScalarDevice, comm));
    scale = 2;
    float x = 1;
    RANK_WEFT(ctx, weftAllReduce(&x, &x, 1, weftFloat32, op, comm, nullptr));
    RANK_CHECK(ctx, x == 2.0f * n, "pointer scalar: got %g", x);
    RANK_WEFT(ctx, weftRedOpDestroy(op, comm));
    RANK_WEFT(ctx, weftCommDestroy(comm));
    return 0;
  }));
}

TEST_CASE("barrier: no rank leaves before every rank has entered", "[groups][multiprocess]") {
  char dir[] = "/tmp/weft-barrier-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string marker = std::string(dir) + "/entered";
  expectAllPassed(runRanks(4, [&](RankContext& ctx) {
    weftComm_t comm = rankComm(ctx);
    if (comm == nullptr) return 1;
    for (int round = 0; round < 3; ++round) {
      const std::string file = marker + std::to_string(round);
      if (ctx.rank == 3) {  // the last to arrive, late
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        std::FILE* f = std::fopen(file.c_str(), "w");
        if (f) std::fclose(f);
      }
      RANK_WEFT(ctx, weftBarrier(comm, nullptr));
      RANK_CHECK(ctx, access(file.c_str(), F_OK) == 0, "round %d: left the barrier before rank 3 entered", round);
    }
    RANK_WEFT(ctx, weftCommDestroy(comm));
    return 0;
  }));
  for (int round = 0; round < 3; ++round) std::remove((marker + std::to_string(round)).c_str());
  rmdir(dir);
}

TEST_CASE("groups: every communicator of a failed group keeps its own error", "[groups][multiprocess]") {
  expectAllPassed(runRanks(1, [](RankContext& ctx) {
    // Init's deadline too: under TSan on 2 busy cores an init of two threads took over 3 s.
    setenv("WEFT_TIMEOUT_MS", "10000", 1);
    weftComm_t comms[2] = {};
    RANK_WEFT(ctx, weftCommInitAll(comms, 2, nullptr));
    float data[2][4] = {{1, 2, 3, 4}, {10, 20, 30, 40}};
    // Rank 0 alone: it times out and is left failed.
    RANK_CHECK(ctx, weftAllReduce(data[0], data[0], 4, weftFloat32, weftSum, comms[0], nullptr) != weftSuccess,
               "a lone all-reduce succeeded");
    // Both in one group: rank 0's part fails at once, rank 1's waits out its deadline for it.
    RANK_WEFT(ctx, weftGroupStart());
    for (int i = 0; i < 2; ++i) RANK_WEFT(ctx, weftAllReduce(data[i], data[i], 4, weftFloat32, weftSum, comms[i], nullptr));
    const weftResult_t ended = weftGroupEnd();
    RANK_CHECK(ctx, ended != weftSuccess, "the group succeeded");
    const std::string thread = weftGetLastError(nullptr), first = weftGetLastError(comms[0]),
                      second = weftGetLastError(comms[1]);
    RANK_CHECK(ctx, !second.empty(), "communicator 1 failed in the group but has no last error");
    RANK_CHECK(ctx, second != first, "both communicators report \"%s\"", first.c_str());
    RANK_CHECK(ctx, thread == first, "the thread's last error \"%s\" is not the returned one \"%s\"", thread.c_str(),
               first.c_str());
    for (weftComm_t comm : comms) RANK_WEFT(ctx, weftCommAbort(comm));
    return 0;
  }));
}
