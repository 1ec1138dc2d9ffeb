// All-reduce across real processes over real sockets: every dtype x op, odd counts,
// in place and out of place, long runs of back-to-back calls, two communicators at once.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "element_codec.h"
#include "multiprocess.h"

using namespace weft::test;

namespace {

// Runs every dtype x op x count x placement on one communicator; returns mismatches.
void checkAllCombinations(RankContext& ctx, weftComm_t comm, const std::vector<size_t>& counts) {
  for (int t = 0; t < weftNumTypes; ++t) {
    auto type = static_cast<weftDataType_t>(t);
    for (int o = 0; o < weftNumOps; ++o) {
      auto op = static_cast<weftRedOp_t>(o);
      for (size_t count : counts) {
        for (bool inPlace : {false, true}) {
          size_t bytes = count * typeSize(type);
          std::vector<char> send(bytes + 1), recv(bytes + 1, static_cast<char>(0x5a));
          for (size_t i = 0; i < count; ++i) storeValue(send.data(), i, type, inputValue(type, op, ctx.rank, ctx.nranks, i));
          void* out = inPlace ? send.data() : recv.data();
          RANK_WEFT(ctx, weftAllReduce(send.data(), out, count, type, op, comm, nullptr));
          size_t wrong = 0, firstWrong = 0;
          for (size_t i = 0; i < count; ++i) {
            if (!resultMatches(out, i, type, op, ctx.nranks) && wrong++ == 0) firstWrong = i;
          }
          RANK_CHECK(ctx, wrong == 0, "type %d op %d count %zu %s: %zu wrong, first at %zu", t, o, count,
                     inPlace ? "in-place" : "out-of-place", wrong, firstWrong);
          char guard = inPlace ? send[bytes] : recv[bytes];
          RANK_CHECK(ctx, guard == (inPlace ? 0 : 0x5a), "type %d op %d count %zu wrote past the end", t, o, count);
        }
      }
    }
  }
}

int allCombinationsBody(RankContext& ctx, const std::vector<size_t>& counts) {
  weftComm_t comm = nullptr;
  RANK_WEFT(ctx, weftCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  if (comm == nullptr) return 1;
  checkAllCombinations(ctx, comm, counts);
  RANK_WEFT(ctx, weftCommDestroy(comm));
  return 0;
}

}  // namespace

TEST_CASE("all-reduce: every dtype x op, odd counts, both placements", "[allreduce][multiprocess]") {
  const std::vector<size_t> counts = {0, 1, 2, 3, 7, 1000, 4099};
  for (int n : {1, 2, 3, 4, 5, 8}) {
    DYNAMIC_SECTION(n << " ranks") {
      auto outcomes = runRanks(n, [&](RankContext& ctx) { return allCombinationsBody(ctx, counts); });
      INFO(describeFailures(outcomes));
      for (const auto& o : outcomes) CHECK(o.exitCode == 0);
    }
  }
}

TEST_CASE("all-reduce: every dtype x op through each algorithm, several chunks", "[allreduce][multiprocess]") {
  const std::vector<size_t> counts = {1, 3, 1000, 4099};
  for (const char* algo : {"ring", "rd", "oneshot"}) {
    for (int n : {3, 4}) {
      DYNAMIC_SECTION(algo << " on " << n << " ranks") {
        setenv("WEFT_ALGO", algo, 1);
        setenv("WEFT_CHUNK_BYTES", "1K", 1);
        auto outcomes = runRanks(n, [&](RankContext& ctx) { return allCombinationsBody(ctx, counts); });
        unsetenv("WEFT_ALGO");
        unsetenv("WEFT_CHUNK_BYTES");
        INFO(describeFailures(outcomes));
        for (const auto& o : outcomes) CHECK(o.exitCode == 0);
      }
    }
  }
}

TEST_CASE("all-reduce: the ring and the tree streaming their output, over shared memory and sockets",
          "[allreduce][multiprocess]") {
  // WEFT_STREAMING_MIN_BYTES=1 makes every out-of-place ring or tree call write its output with
  // streaming stores, as only calls larger than the cache do by default: sums through scratch
  // slots (divided there for Avg), sent on from there, and the last receive straight into the
  // output. The suites run this binary with WEFT_TRANSPORT set; the later tests get it back.
  const char* suiteTransport = std::getenv("WEFT_TRANSPORT");
  const std::string restore = suiteTransport ? suiteTransport : "";
  for (const char* algo : {"ring", "tree"}) {
    for (const char* transport : {"shm", "socket"}) {
      for (int n : {2, 3, 4}) {  // with 3 and 4, chains whose middle ranks forward
        DYNAMIC_SECTION(algo << " over " << transport << " on " << n << " ranks") {
          setenv("WEFT_TRANSPORT", transport, 1);
          setenv("WEFT_ALGO", (std::string("allreduce:") + algo).c_str(), 1);
          setenv("WEFT_CHUNK_BYTES", "1K", 1);
          setenv("WEFT_STREAMING_MIN_BYTES", "1", 1);
          auto outcomes = runRanks(n, [](RankContext& ctx) { return allCombinationsBody(ctx, {1, 3, 1000, 4099}); });
          for (const char* name : {"WEFT_ALGO", "WEFT_CHUNK_BYTES", "WEFT_STREAMING_MIN_BYTES"}) unsetenv(name);
          if (suiteTransport) {
            setenv("WEFT_TRANSPORT", restore.c_str(), 1);
          } else {
            unsetenv("WEFT_TRANSPORT");
          }
          INFO(describeFailures(outcomes));
          for (const auto& o : outcomes) CHECK(o.exitCode == 0);
        }
      }
    }
  }
}

TEST_CASE("all-reduce: large messages through every algorithm and the ring pipeline", "[allreduce][multiprocess]") {
  for (const char* algo : {"ring", "tree", "rd", "oneshot"}) {
    for (int n : {2, 3, 4}) {
      DYNAMIC_SECTION(algo << " on " << n << " ranks") {
        setenv("WEFT_ALGO", algo, 1);
        setenv("WEFT_CHUNK_BYTES", "64K", 1);  // many chunks per block
        auto outcomes = runRanks(n, [](RankContext& ctx) {
          weftComm_t comm = nullptr;
          RANK_WEFT(ctx, weftCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
          if (comm == nullptr) return 1;
          for (size_t count : {size_t{1} << 20, (size_t{1} << 20) + 12345}) {
            for (bool inPlace : {false, true}) {
              std::vector<float> send(count), recv(count, -1.0f);
              for (size_t i = 0; i < count; ++i) send[i] = static_cast<float>((i + static_cast<size_t>(ctx.rank)) % 1024);
              float* out = inPlace ? send.data() : recv.data();
              RANK_WEFT(ctx, weftAllReduce(send.data(), out, count, weftFloat32, weftSum, comm, nullptr));
              size_t wrong = 0;
              for (size_t i = 0; i < count; ++i) {
                float expect = 0;
                for (int r = 0; r < ctx.nranks; ++r) expect += static_cast<float>((i + static_cast<size_t>(r)) % 1024);
                wrong += out[i] != expect;
              }
              RANK_CHECK(ctx, wrong == 0, "count %zu %s: %zu wrong", count, inPlace ? "in-place" : "out-of-place", wrong);
            }
          }
          RANK_WEFT(ctx, weftCommDestroy(comm));
          return 0;
        });
        unsetenv("WEFT_ALGO");
        unsetenv("WEFT_CHUNK_BYTES");
        INFO(describeFailures(outcomes));
        for (const auto& o : outcomes) CHECK(o.exitCode == 0);
      }
    }
  }
}

TEST_CASE("Avg of narrow floats near their largest value: inputs are divided before the sum", "[allreduce][multiprocess]") {
  // Every rank sends v, so the average is v; summed first, half would overflow to inf and fp8
  // saturate (e4m3: 448 / 2 = 224). Through the arena (7 elements) and the executor's ring
  // (50000), and a reduce-scatter.
  struct Case {
    weftDataType_t type;
    double value, tolerance;  // relative: the rounding of v / n and of the sum
  };
  const Case cases[] = {{weftFloat16, 40000, 0.002}, {weftBfloat16, 3e38, 0.016},
                        {weftFloat8e4m3, 288, 0.125}, {weftFloat8e5m2, 40960, 0.25}};
  for (int n : {2, 3}) {
    DYNAMIC_SECTION(n << " ranks") {
      auto outcomes = runRanks(n, [&](RankContext& ctx) {
        weftComm_t comm = nullptr;
        RANK_WEFT(ctx, weftCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
        if (comm == nullptr) return 1;
        for (const Case& c : cases) {
          for (size_t count : {size_t{7}, size_t{50000}}) {
            for (bool scatter : {false, true}) {
              const size_t inCount = scatter ? count * static_cast<size_t>(ctx.nranks) : count;
              std::vector<char> send(inCount * typeSize(c.type)), recv(count * typeSize(c.type));
              for (size_t i = 0; i < inCount; ++i) storeValue(send.data(), i, c.type, c.value);
              RANK_WEFT(ctx, scatter ? weftReduceScatter(send.data(), recv.data(), count, c.type, weftAvg, comm, nullptr)
                                     : weftAllReduce(send.data(), recv.data(), count, c.type, weftAvg, comm, nullptr));
              size_t wrong = 0;
              double got = c.value;
              for (size_t i = 0; i < count; ++i) {
                const double v = loadFloat(recv.data(), i, c.type);
                if (!(std::fabs(v - c.value) <= c.tolerance * c.value) && wrong++ == 0) got = v;
              }
              RANK_CHECK(ctx, wrong == 0, "type %d count %zu %s: avg of %g is %g (%zu wrong)", c.type, count,
                         scatter ? "reduce-scatter" : "all-reduce", c.value, got, wrong);
            }
          }
        }
        RANK_WEFT(ctx, weftCommDestroy(comm));
        return 0;
      });
      INFO(describeFailures(outcomes));
      for (const auto& o : outcomes) CHECK(o.exitCode == 0);
    }
  }
}

TEST_CASE("all-reduce: 1000 back-to-back calls", "[allreduce][multiprocess]") {
  for (int n : {2, 4}) {
    DYNAMIC_SECTION(n << " ranks") {
      auto outcomes = runRanks(n, [](RankContext& ctx) {
        weftComm_t comm = nullptr;
        RANK_WEFT(ctx, weftCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
        if (comm == nullptr) return 1;
        for (int call = 0; call < 1000 && ctx.failures == 0; ++call) {
          int64_t values[3] = {call, ctx.rank, call * ctx.rank};
          RANK_WEFT(ctx, weftAllReduce(values, values, 3, weftInt64, weftSum, comm, nullptr));
          int64_t size = ctx.nranks, rankSum = size * (size - 1) / 2;
          RANK_CHECK(ctx, values[0] == call * size && values[1] == rankSum && values[2] == call * rankSum,
                     "call %d: got %ld %ld %ld", call, static_cast<long>(values[0]), static_cast<long>(values[1]),
                     static_cast<long>(values[2]));
        }
        RANK_WEFT(ctx, weftCommDestroy(comm));
        return 0;
      });
      INFO(describeFailures(outcomes));
      for (const auto& o : outcomes) CHECK(o.exitCode == 0);
    }
  }
}

TEST_CASE("all-reduce: two communicators used at once from two threads", "[allreduce][multiprocess]") {
  auto outcomes = runRanks(3, [](RankContext& ctx) {
    // Each communicator needs its own id; rank 0 made one, the second is derived by a
    // one-element all-reduce (Max) of an id made by rank 0 on the first communicator.
    weftComm_t first = nullptr;
    RANK_WEFT(ctx, weftCommInitRank(&first, ctx.nranks, ctx.id, ctx.rank));
    if (first == nullptr) return 1;
    weftUniqueId second{};
    if (ctx.rank == 0) RANK_WEFT(ctx, weftGetUniqueId(&second));
    RANK_WEFT(ctx, weftAllReduce(&second, &second, sizeof(second), weftUint8, weftMax, first, nullptr));
    weftComm_t other = nullptr;
    RANK_WEFT(ctx, weftCommInitRank(&other, ctx.nranks, second, ctx.rank));
    if (other == nullptr) return 1;
    auto hammer = [&](weftComm_t comm, int seed, int* failures) {
      for (int call = 0; call < 200; ++call) {
        std::vector<int32_t> v(1000 + static_cast<size_t>(call), seed + ctx.rank);
        if (weftAllReduce(v.data(), v.data(), v.size(), weftInt32, weftSum, comm, nullptr) != weftSuccess) {
          ++*failures;
          return;
        }
        int32_t expect = seed * ctx.nranks + ctx.nranks * (ctx.nranks - 1) / 2;
        for (int32_t x : v) *failures += x != expect;
      }
    };
    int failuresA = 0, failuresB = 0;
    std::thread a(hammer, first, 10, &failuresA);
    std::thread b(hammer, other, 1000, &failuresB);
    a.join();
    b.join();
    RANK_CHECK(ctx, failuresA == 0 && failuresB == 0, "failures: first %d, second %d", failuresA, failuresB);
    RANK_WEFT(ctx, weftCommDestroy(first));
    RANK_WEFT(ctx, weftCommDestroy(other));
    return 0;
  });
  INFO(describeFailures(outcomes));
  for (const auto& o : outcomes) CHECK(o.exitCode == 0);
}
