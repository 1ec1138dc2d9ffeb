// The data-parallel layer: gradients averaged over real ranks whatever order they become ready
// in, buckets started during "backward", parameters broadcast from rank 0; and the sampler's
// shards (disjoint, covering, deterministic, reshuffled per epoch, drop_last).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "multiprocess.h"
#include "weft/ddp.hpp"

using namespace weft::test;
using weft::ddp::DistributedSampler;
using weft::ddp::Parameter;
using weft::ddp::Reducer;

TEST_CASE("ddp: gradients averaged across ranks, buckets started before finish", "[ddp][multiprocess]") {
  for (int n : {1, 2, 3}) {
    DYNAMIC_SECTION(n << " ranks") {
      auto outcomes = runRanks(n, [](RankContext& ctx) {
        weftComm_t comm = nullptr;
        RANK_WEFT(ctx, weftCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
        if (comm == nullptr) return 1;
        // Six float parameters of assorted sizes, one double; small buckets (16 KiB).
        const std::vector<size_t> sizes = {1000, 7, 4096, 3, 2500, 1, 777};
        std::vector<std::vector<float>> weights, grads;
        std::vector<double> wd(50), gd(50);
        std::vector<Parameter> params;
        for (size_t i = 0; i < sizes.size(); ++i) {
          weights.emplace_back(sizes[i], static_cast<float>(ctx.rank * 100 + i));
          grads.emplace_back(sizes[i], 0.0f);
        }
        for (size_t i = 0; i < sizes.size(); ++i) {
          params.push_back({weights[i].data(), grads[i].data(), sizes[i], weftFloat32});
        }
        params.push_back({wd.data(), gd.data(), wd.size(), weftFloat64});
        Reducer reducer(comm, params, 16 * 1024);
        RANK_CHECK(ctx, reducer.bucketCount() >= 3, "only %zu buckets", reducer.bucketCount());
        RANK_WEFT(ctx, reducer.broadcastParameters());
        for (size_t i = 0; i < sizes.size(); ++i) {
          RANK_CHECK(ctx, weights[i].front() == static_cast<float>(i) && weights[i].back() == static_cast<float>(i),
                     "parameter %zu not rank 0's after broadcast", i);
        }
        for (int step = 0; step < 3; ++step) {
          for (size_t i = 0; i < sizes.size(); ++i) {
            for (size_t j = 0; j < sizes[i]; ++j) grads[i][j] = static_cast<float>(ctx.rank + step + j % 5);
          }
          std::fill(gd.begin(), gd.end(), static_cast<double>(ctx.rank) * 2);
          // Backward produces gradients in reverse order, with a shuffle within (the order
          // must not matter); every rank uses its own order.
          std::vector<size_t> order(params.size());
          std::iota(order.rbegin(), order.rend(), size_t{0});
          std::mt19937 rng(static_cast<unsigned>(ctx.rank * 31 + step));
          std::shuffle(order.begin() + 2, order.end(), rng);
          for (size_t k : order) RANK_WEFT(ctx, reducer.markReady(k));
          RANK_WEFT(ctx, reducer.finish());
          RANK_CHECK(ctx, reducer.bucketsStartedEarly() > 0, "no bucket started before finish()");
          const float mean = static_cast<float>(ctx.nranks - 1) / 2.0f;
          size_t wrong = 0;
          for (size_t i = 0; i < sizes.size(); ++i) {
            for (size_t j = 0; j < sizes[i]; ++j) wrong += grads[i][j] != mean + static_cast<float>(step + j % 5);
          }
          for (double g : gd) wrong += g != static_cast<double>(ctx.nranks - 1);
          RANK_CHECK(ctx, wrong == 0, "step %d: %zu wrong averaged gradients", step, wrong);
        }
        // A gradient marked twice in one step is a usage error.
        RANK_WEFT(ctx, reducer.markReady(0));
        RANK_CHECK(ctx, reducer.markReady(0) == weftInvalidUsage, "double markReady accepted");
        RANK_CHECK(ctx, reducer.lastError().find("twice") != std::string::npos, "lastError: %s",
                   reducer.lastError().c_str());
        RANK_WEFT(ctx, reducer.finish());
        RANK_WEFT(ctx, weftCommDestroy(comm));
        return 0;
      });
      INFO(describeFailures(outcomes));
      for (const auto& o : outcomes) CHECK(o.exitCode == 0);
    }
  }
}

TEST_CASE("ddp: large buckets on one host are averaged reading the peers' buckets directly", "[ddp][multiprocess]") {
  // Buckets come from weftHostMemAlloc, so a bucket of 256 KiB or more takes the direct path
  // (coll/direct_allreduce.h); each rank's log says so. The parent never logs itself, so the
  // ranks' WEFT_DEBUG takes effect.
  setenv("WEFT_DEBUG", "INFO", 1);
  auto outcomes = runRanks(2, [](RankContext& ctx) {
    weftComm_t comm = rankComm(ctx);
    if (comm == nullptr) return 1;
    const std::vector<size_t> sizes = {size_t{3} << 20, 12345};  // one bucket of about 12 MiB
    std::vector<std::vector<float>> weights, grads;
    std::vector<Parameter> params;
    for (size_t count : sizes) {
      weights.emplace_back(count, 0.0f);
      grads.emplace_back(count, 0.0f);
    }
    for (size_t i = 0; i < sizes.size(); ++i) params.push_back({weights[i].data(), grads[i].data(), sizes[i], weftFloat32});
    Reducer reducer(comm, params);
    RANK_CHECK(ctx, reducer.bucketCount() == 1, "%zu buckets", reducer.bucketCount());
    for (size_t i = 0; i < sizes.size(); ++i) {
      for (size_t j = 0; j < sizes[i]; ++j) grads[i][j] = static_cast<float>(ctx.rank * 4 + j % 7);
    }
    for (size_t k = params.size(); k-- > 0;) RANK_WEFT(ctx, reducer.markReady(k));
    RANK_WEFT(ctx, reducer.finish());
    size_t wrong = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      for (size_t j = 0; j < sizes[i]; ++j) wrong += grads[i][j] != 2.0f + static_cast<float>(j % 7);
    }
    RANK_CHECK(ctx, wrong == 0, "%zu wrong averaged gradients", wrong);
    RANK_WEFT(ctx, weftCommDestroy(comm));
    return 0;
  });
  unsetenv("WEFT_DEBUG");
  INFO(describeFailures(outcomes));
  for (const auto& o : outcomes) {
    CHECK(o.exitCode == 0);
    CHECK(o.output.find("read the peers' buffers directly") != std::string::npos);
  }
}

TEST_CASE("ddp: an unused gradient adds what its buffer holds, one no rank used is left alone", "[ddp][multiprocess]") {
  auto outcomes = runRanks(2, [](RankContext& ctx) {
    weftComm_t comm = nullptr;
    RANK_WEFT(ctx, weftCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
    if (comm == nullptr) return 1;
    // a is used everywhere; b only on rank 0 in step 1 and nowhere in step 2. Gradients
    // accumulate between steps (nobody zeroes them), so rank 1's b holds 1.5 from step 0.
    std::vector<float> wa(4), wb(4), ga(4), gb(4), fresh(4);
    Reducer reducer(comm, {{wa.data(), ga.data(), 4, weftFloat32}, {wb.data(), gb.data(), 4, weftFloat32}});
    std::fill(ga.begin(), ga.end(), 1.0f);
    std::fill(gb.begin(), gb.end(), ctx.rank == 0 ? 1.0f : 2.0f);
    RANK_WEFT(ctx, reducer.markReady(1));
    RANK_WEFT(ctx, reducer.markReady(0));
    RANK_WEFT(ctx, reducer.finish());
    RANK_CHECK(ctx, gb[0] == 1.5f && reducer.usedByAnyRank(1), "step 0: b's gradient %g", gb[0]);

    std::fill(fresh.begin(), fresh.end(), 4.0f);  // rank 0's b: 1.5 + 2.5
    if (ctx.rank == 0) RANK_WEFT(ctx, reducer.markReady(1, fresh.data()));
    RANK_WEFT(ctx, reducer.markReady(0));
    RANK_WEFT(ctx, reducer.finish());
    // (4 + 1.5) / 2: rank 1 adds the 1.5 it holds, as torch's DDP adds an unused .grad.
    RANK_CHECK(ctx, gb[0] == 2.75f, "step 1: b's gradient %g, expected 2.75", gb[0]);

    std::fill(gb.begin(), gb.end(), static_cast<float>(10 + ctx.rank));
    RANK_WEFT(ctx, reducer.markReady(0));
    RANK_WEFT(ctx, reducer.finish());
    RANK_CHECK(ctx, !reducer.usedByAnyRank(1) && reducer.usedByAnyRank(0), "used flags wrong");
    RANK_CHECK(ctx, gb[0] == static_cast<float>(10 + ctx.rank), "step 2: unused b overwritten with %g", gb[0]);
    RANK_CHECK(ctx, ga[0] == 1.0f, "step 2: a's gradient %g", ga[0]);
    RANK_WEFT(ctx, weftCommDestroy(comm));
    return 0;
  });
  INFO(describeFailures(outcomes));
  for (const auto& o : outcomes) CHECK(o.exitCode == 0);
}

TEST_CASE("ddp: a bucket whose all-reduce could not start fails finish, whatever markReady said", "[ddp][multiprocess]") {
  auto outcomes = runRanks(1, [](RankContext& ctx) {
    weftComm_t comm = nullptr;
    RANK_WEFT(ctx, weftCommInitRank(&comm, 1, ctx.id, 0));
    if (comm == nullptr) return 1;
    std::vector<float> weight(8, 1.0f), grad(8, 2.0f), out(8, -1.0f);
    Reducer reducer(comm, {{weight.data(), grad.data(), weight.size(), weftFloat32}});
    RANK_WEFT(ctx, weftCommAbort(comm));  // every call on it fails from now on
    RANK_CHECK(ctx, reducer.markReady(0, grad.data()) != weftSuccess, "a bucket started on an aborted communicator");
    RANK_CHECK(ctx, reducer.finish({out.data()}) != weftSuccess, "finish succeeded with a bucket never averaged");
    RANK_CHECK(ctx, out[0] == -1.0f, "gradients written after a failure: %g", out[0]);
    return 0;
  });
  INFO(describeFailures(outcomes));
  for (const auto& o : outcomes) CHECK(o.exitCode == 0);
}

TEST_CASE("ddp: bad parameters are refused, not read", "[ddp][multiprocess]") {
  auto outcomes = runRanks(1, [](RankContext& ctx) {
    weftComm_t comm = nullptr;
    RANK_WEFT(ctx, weftCommInitRank(&comm, 1, ctx.id, 0));
    if (comm == nullptr) return 1;
    std::vector<float> weight(8, 1.0f), grad(8, 2.0f);
    bool threw = false;
    try {
      Reducer bad(comm, {{weight.data(), grad.data(), weight.size(), static_cast<weftDataType_t>(weftNumTypes)}});
    } catch (const std::invalid_argument&) {
      threw = true;
    }
    RANK_CHECK(ctx, threw, "a parameter of no data type was taken");
    // Byte counts that overflow size_t, or that no bucket can hold: two parameters of 2^63 bytes
    // once summed to a bucket of 0 bytes, into which markReady copied 2^63.
    const std::pair<size_t, const char*> huge[] = {{SIZE_MAX / 2, "overflow"}, {size_t{1} << 61, "cannot allocate"}};
    for (const auto& [count, words] : huge) {
      std::string what;
      try {
        Reducer bad(comm, {{weight.data(), grad.data(), count, weftFloat32},
                           {weight.data(), grad.data(), count, weftFloat32}});
      } catch (const std::exception& e) {
        what = e.what();
      }
      RANK_CHECK(ctx, what.find(words) != std::string::npos, "parameters of %zu floats: \"%s\"", count, what.c_str());
    }
    {
      // No grad buffer and no gradient passed: nothing to read, an error, and lastError() says so.
      Reducer reducer(comm, {{weight.data(), nullptr, weight.size(), weftFloat32}});
      RANK_CHECK(ctx, reducer.markReady(0) == weftInvalidArgument, "markReady read a gradient from nowhere");
      RANK_CHECK(ctx, reducer.lastError().find("no grad buffer") != std::string::npos, "lastError: %s",
                 reducer.lastError().c_str());
      RANK_CHECK(ctx, reducer.markReady(3, grad.data()) == weftInvalidUsage, "markReady of parameter 3 of 1");
      RANK_CHECK(ctx, reducer.lastError().find("only 1 parameters") != std::string::npos, "lastError: %s",
                 reducer.lastError().c_str());
      RANK_CHECK(ctx, reducer.markReady(0, grad.data()) == weftSuccess, "the refused markReady counted as ready");
      std::vector<float> out(8, -1.0f);
      RANK_WEFT(ctx, reducer.finish({out.data()}));
      RANK_CHECK(ctx, out[0] == 2.0f, "averaged gradient %g, expected 2", out[0]);
    }
    RANK_WEFT(ctx, weftCommDestroy(comm));
    return 0;
  });
  INFO(describeFailures(outcomes));
  for (const auto& o : outcomes) CHECK(o.exitCode == 0);
}

TEST_CASE("ddp: the sampler refuses a rank outside its replicas, as torch does", "[ddp]") {
  CHECK_THROWS_AS(DistributedSampler(10, 2, 2), std::invalid_argument);
  CHECK_THROWS_AS(DistributedSampler(10, 2, -1), std::invalid_argument);
  CHECK_THROWS_AS(DistributedSampler(10, 0, 0), std::invalid_argument);
  CHECK_THROWS_AS(DistributedSampler(10, -3, 0), std::invalid_argument);
  CHECK_NOTHROW(DistributedSampler(10, 2, 1));
  // The padded count of a dataset near SIZE_MAX (size + replicas - 1 wrapped to 0).
  CHECK(DistributedSampler(SIZE_MAX, 2, 0, false).numSamples() == SIZE_MAX / 2 + 1);
  CHECK(DistributedSampler(SIZE_MAX, 2, 0, false, 0, true).numSamples() == SIZE_MAX / 2);
}

TEST_CASE("ddp: the shuffled sampler gives torch's very order", "[ddp]") {
  // What torch 1.13's DistributedSampler(range(size), R, rank, shuffle=True, seed, drop_last)
  // yields after set_epoch(epoch), printed by torch itself; a C++ trainer and a Python one see
  // the same batches. (size, replicas, seed, epoch, drop_last) -> each rank's indices.
  struct Case {
    size_t size;
    int replicas;
    uint64_t seed, epoch;
    bool dropLast;
    std::vector<std::vector<size_t>> byRank;
  };
  const Case cases[] = {
      {10, 2, 7, 0, false, {{5, 3, 1, 9, 8}, {0, 4, 7, 6, 2}}},
      {10, 2, 7, 3, false, {{7, 6, 3, 9, 2}, {4, 1, 5, 8, 0}}},
      {11, 3, 42, 1, true, {{3, 2, 6}, {9, 8, 10}, {4, 7, 1}}},
      {5, 4, 0, 0, false, {{4, 2}, {0, 4}, {1, 0}, {3, 1}}},
  };
  for (const Case& c : cases) {
    for (int r = 0; r < c.replicas; ++r) {
      DistributedSampler s(c.size, c.replicas, r, true, c.seed, c.dropLast);
      s.setEpoch(c.epoch);
      CAPTURE(c.size, c.replicas, c.seed, c.epoch, c.dropLast, r);
      CHECK(s.indices() == c.byRank[static_cast<size_t>(r)]);
    }
  }
}

TEST_CASE("ddp: the sampler shards like torch's DistributedSampler", "[ddp]") {
  for (size_t size : {0, 1, 10, 11, 100, 101}) {
    for (int replicas : {1, 2, 3, 4}) {
      for (bool dropLast : {false, true}) {
        DYNAMIC_SECTION(size << " samples, " << replicas << " replicas, drop_last " << dropLast) {
          const size_t expect = dropLast && size % static_cast<size_t>(replicas) != 0
                                    ? size / static_cast<size_t>(replicas)
                                    : (size + static_cast<size_t>(replicas) - 1) / static_cast<size_t>(replicas);
          std::multiset<size_t> all;
          std::vector<std::vector<size_t>> shards;
          for (int r = 0; r < replicas; ++r) {
            DistributedSampler s(size, replicas, r, true, 7, dropLast);
            s.setEpoch(3);
            shards.push_back(s.indices());
            CHECK(s.numSamples() == expect);
            CHECK(shards.back().size() == expect);
            for (size_t i : shards.back()) {
              CHECK(i < size);
              all.insert(i);
            }
            // Deterministic per (seed, epoch).
            DistributedSampler again(size, replicas, r, true, 7, dropLast);
            again.setEpoch(3);
            CHECK(again.indices() == shards.back());
          }
          std::set<size_t> distinct(all.begin(), all.end());
          if (!dropLast) {
            CHECK(distinct.size() == size);  // everything covered (padding repeats some)
          } else {
            CHECK(all.size() == distinct.size());  // disjoint
          }
          if (size >= 10 && replicas == 2) {
            DistributedSampler other(size, replicas, 0, true, 7, dropLast);
            other.setEpoch(4);
            CHECK(other.indices() != shards[0]);  // reshuffled by set_epoch
            DistributedSampler plain(size, replicas, 1, false, 7, dropLast);
            CHECK(plain.indices().front() == 1);  // no shuffle: rank r takes r, r+R, ...
          }
        }
      }
    }
  }
}
