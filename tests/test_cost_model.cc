// The tuner's cost model: it prices trees by the planned depth and fan-out, crowded hosts by
// their ranks per CPU and bytes by whether they fit in a rank's share of the cache; and
// WEFT_TUNE=measure's fit, which recovers the costs from timings taken at init.
#include <catch2/catch.hpp>

#include <vector>

#include "coll/arena_allreduce.h"
#include "coll/cost_fit.h"
#include "coll/tuner.h"
#include "placements.h"
#include "plan/placement.h"
#include "plan/planner.h"

using namespace weft;
using test::interleaved;

// The element size of the benchmarks' all-reduces (float32), which the model's ring prices by.
constexpr size_t kF32 = sizeof(float);

TEST_CASE("cost model: trees priced by the planned depth, crowded hosts by ranks per CPU", "[planner][tuner]") {
  using coll::Algorithm;
  using coll::Collective;
  const auto spread = interleaved(4, 2, 8);  // 4 hosts: host tree depth 2, chains of 2
  const coll::CommLayout layout =
      coll::layoutOf(plan::rankOrderOf(plan::makePlan(spread)), 8, plan::ranksPerCpu(spread));
  CHECK(layout.treeDepth == 3);
  CHECK(layout.treeFanOut == 3);  // a host's first rank: two hosts and its chain below it
  CHECK(layout.ranksPerCpu == 1.0);

  const auto oneHost = interleaved(1, 8, 2);
  CHECK(plan::ranksPerCpu(oneHost) == 4.0);
  const coll::CommLayout crowded = coll::layoutOf(plan::rankOrderOf(plan::makePlan(oneHost)), 8, 4.0);
  CHECK(crowded.treeDepth == 7);  // one host: the chain
  const coll::LinkCost link = coll::defaultSharedMemoryCost();
  for (size_t bytes : {size_t{8}, size_t{1} << 20}) {
    coll::CommLayout roomy = crowded;
    roomy.ranksPerCpu = 1;
    CHECK(coll::predictUs(link, crowded, Collective::AllReduce, Algorithm::Ring, bytes, kF32, 1 << 19) >
          2 * coll::predictUs(link, roomy, Collective::AllReduce, Algorithm::Ring, bytes, kF32, 1 << 19));
    // A deeper tree costs more: the chain of one host against the trees over four.
    CHECK(coll::predictUs(link, roomy, Collective::AllReduce, Algorithm::Tree, bytes, kF32, 1 << 19) >
          coll::predictUs(link, layout, Collective::AllReduce, Algorithm::Tree, bytes, kF32, 1 << 19));
  }
  // Unknown CPU counts never make a host look crowded.
  CHECK(plan::ranksPerCpu(interleaved(1, 8, 0)) == 1.0);
}

TEST_CASE("cost model: a ring whose blocks are partly empty costs less, by the share that holds data", "[tuner]") {
  using coll::Algorithm;
  using coll::Collective;
  const auto oneHost = interleaved(1, 8, 2);
  const coll::CommLayout layout =
      coll::layoutOf(plan::rankOrderOf(plan::makePlan(oneHost)), 8, plan::ranksPerCpu(oneHost));
  const coll::LinkCost link = coll::defaultSharedMemoryCost();
  auto ring = [&](size_t bytes, size_t elementSize) {
    return coll::predictUs(link, layout, Collective::AllReduce, Algorithm::Ring, bytes, elementSize, 1 << 17);
  };
  // 32 bytes: 8 floats fill the 8 blocks; 4 doubles fill half of them, 2 of 16 bytes a quarter.
  const double full = ring(32, kF32);
  CHECK(ring(32, 1) == Approx(full));  // more elements than ranks: the element size is irrelevant
  CHECK(ring(32, sizeof(double)) == Approx(0.81 * full));
  CHECK(ring(32, 16) == Approx(0.715 * full));
  // Only the ring's blocks can be empty: the tree halves the buffer, other rings take one block each.
  auto price = [&](Collective collective, Algorithm a, size_t elementSize) {
    return coll::predictUs(link, layout, collective, a, 32, elementSize, 1 << 17);
  };
  CHECK(price(Collective::AllReduce, Algorithm::Tree, 16) == price(Collective::AllReduce, Algorithm::Tree, 4));
  CHECK(price(Collective::AllGather, Algorithm::Ring, 16) == price(Collective::AllGather, Algorithm::Ring, 4));
}

TEST_CASE("cost model: a tree is priced by its busiest rank, and a tie with the ring keeps the ring", "[tuner]") {
  using coll::Algorithm;
  using coll::Collective;
  const coll::LinkCost link = coll::defaultSharedMemoryCost();
  coll::TuningConfig config;
  config.pipeline.chunkBytes = coll::kSharedMemoryChunkBytes;
  auto price = [&](const coll::CommLayout& layout, Algorithm a, size_t bytes) {
    return coll::predictUs(link, layout, Collective::AllReduce, a, bytes, kF32, config.pipeline.chunkBytes);
  };
  // A CPU per rank: behind the first chunk a chain's interior rank reduces and copies every
  // chunk, where a ring's rank handles (n-1)/n of the buffer, so many chunks cost about 4/3 as
  // much (a little less: the tree's steps are twice the ring's chunks, so it waits fewer times).
  const auto roomy = interleaved(1, 4, 4);
  const coll::CommLayout spacious = coll::layoutOf(plan::rankOrderOf(plan::makePlan(roomy)), 4, plan::ranksPerCpu(roomy));
  const size_t large = size_t{64} << 20;
  CHECK(price(spacious, Algorithm::Tree, large) / price(spacious, Algorithm::Ring, large) == Approx(4.0 / 3).epsilon(0.03));
  // A host with 2 CPUs: the chains' work together is the ring's, and the first step's two
  // working ranks have a CPU each while the waiting ones yield. Up to one step (a chunk of each
  // half) this prices the tree exactly as the ring on any number of ranks, and the tuner keeps
  // the ring, whichever way rounding tips the tie, for link costs WEFT_TUNE=measure may fit.
  for (int n : {3, 4, 8}) {
    const auto crowded = interleaved(1, n, 2);
    coll::CommLayout shared =
        coll::layoutOf(plan::rankOrderOf(plan::makePlan(crowded)), n, plan::ranksPerCpu(crowded));
    shared.cacheBytesPerRank = size_t{1} << 20;  // 32 KiB in cache, 256 KiB between the rates
    for (size_t bytes : {size_t{32} << 10, size_t{256} << 10}) {
      CHECK(price(shared, Algorithm::Tree, bytes) == Approx(price(shared, Algorithm::Ring, bytes)));
      int treeChosen = 0;
      for (double alpha : {0.5, 0.9, 1.1, 1.7, 2.3, 3.1}) {
        for (double gbps : {1.3, 2.9, 4.5, 7.7, 11.0}) {
          for (double cached : {0.3, 0.45, 0.7}) {
            const coll::LinkCost fitted{alpha, 1.0 / (gbps * 1000), 1.0 / (gbps * 2300), cached};
            treeChosen +=
                coll::chooseAlgorithm(config, fitted, shared, Collective::AllReduce, bytes, kF32) == Algorithm::Tree;
          }
        }
      }
      CHECK(treeChosen == 0);
    }
  }
  // One CPU for all: the first step's two working ranks share it too, so the tree's one step
  // costs the CPU what the ring's do, not half.
  const auto single = interleaved(1, 4, 1);
  const coll::CommLayout one = coll::layoutOf(plan::rankOrderOf(plan::makePlan(single)), 4, plan::ranksPerCpu(single));
  CHECK(price(one, Algorithm::Tree, size_t{32} << 10) == Approx(price(one, Algorithm::Ring, size_t{32} << 10)));
  CHECK(coll::chooseAlgorithm(config, link, one, Collective::AllReduce, size_t{32} << 10, kF32) != Algorithm::Tree);
}

TEST_CASE("tuner: where ranks share CPUs, a tree all-reduce must be priced well under the ring to be taken",
          "[tuner]") {
  using coll::Algorithm;
  using coll::Collective;
  coll::TuningConfig config;
  config.pipeline.chunkBytes = coll::kSharedMemoryChunkBytes;
  config.oneShotMaxBytes = config.recursiveDoublingMaxBytes = 0;  // the ring and the tree only
  int narrowWins = 0;  // sizes where the tree is priced under the ring, but not by a quarter
  for (int n : {4, 8}) {
    const auto crowdedHost = interleaved(1, n, 2);
    coll::CommLayout crowded =
        coll::layoutOf(plan::rankOrderOf(plan::makePlan(crowdedHost)), n, plan::ranksPerCpu(crowdedHost));
    crowded.cacheBytesPerRank = (size_t{32} << 20) / static_cast<size_t>(n);  // a 2-CPU VM's 32 MiB of L3 as counted
    coll::CommLayout roomy = crowded;
    roomy.ranksPerCpu = 1;
    for (double alpha : {0.5, 1.1, 2.3}) {
      for (double gbps : {2.9, 4.5, 7.7}) {
        const coll::LinkCost link{alpha, 1.0 / (gbps * 1000), 1.0 / (gbps * 2300), 0.45};
        for (size_t bytes = size_t{32} << 10; bytes <= (size_t{1} << 20); bytes *= 2) {
          auto price = [&](const coll::CommLayout& layout, Algorithm a) {
            return coll::predictUs(link, layout, Collective::AllReduce, a, bytes, kF32, config.pipeline.chunkBytes);
          };
          auto choose = [&](const coll::CommLayout& layout) {
            return coll::chooseAlgorithm(config, link, layout, Collective::AllReduce, bytes, kF32);
          };
          const Algorithm chosen = choose(crowded);
          const double tree = price(crowded, Algorithm::Tree), ring = price(crowded, Algorithm::Ring);
          CAPTURE(n, alpha, gbps, bytes, tree, ring);
          if (chosen == Algorithm::Tree) CHECK(tree <= 0.75 * ring);
          if (tree < ring * (1 - 1e-6) && tree > 0.75 * ring) {
            ++narrowWins;
            CHECK(chosen != Algorithm::Tree);
          }
          // Where every rank has a CPU the cheaper price decides.
          CHECK((choose(roomy) == Algorithm::Tree) ==
                (price(roomy, Algorithm::Tree) < price(roomy, Algorithm::Ring) * (1 - 1e-9)));
        }
      }
    }
  }
  CHECK(narrowWins > 0);  // the case above was met
}

TEST_CASE("cost model: bytes move faster while the buffers fit in each rank's share of the cache", "[planner][tuner]") {
  using coll::Algorithm;
  using coll::Collective;
  auto withCache = [](std::vector<plan::RankPlacement> ranks, size_t cacheBytes) {
    for (auto& r : ranks) r.cacheBytes = cacheBytes;
    return ranks;
  };
  // Two hosts of 4 ranks and 4 CPUs with 32 MiB each, one of 2 ranks and 2 CPUs with 8 MiB: the
  // least share is 4 MiB. The cache is shared by every CPU: with 8 CPUs each, 1 MiB.
  auto mixed = withCache(interleaved(2, 4, 4), size_t{32} << 20);
  for (auto& r : mixed) r.host = r.host == 1 ? 2 : r.host;
  auto small = withCache(interleaved(1, 2, 2), size_t{8} << 20);
  for (auto& r : small) r.host = 1;
  mixed.insert(mixed.end(), small.begin(), small.end());
  CHECK(plan::cacheBytesPerRank(mixed) == (size_t{4} << 20));
  auto roomier = mixed;
  for (auto& r : roomier) r.cpus = 8;
  CHECK(plan::cacheBytesPerRank(roomier) == (size_t{1} << 20));
  auto cpusUnknown = mixed;
  for (auto& r : cpusUnknown) r.cpus = 0;
  CHECK(plan::cacheBytesPerRank(cpusUnknown) == (size_t{4} << 20));
  auto unknown = mixed;
  unknown.back().cacheBytes = 0;
  CHECK(plan::cacheBytesPerRank(unknown) == 0);
  // A VM's 2 CPUs reporting their host's 260 MiB of L3: it counts for 16 MiB a CPU, so each of
  // 2 ranks has 16 MiB; without a CPU count nothing caps it.
  auto vm = withCache(interleaved(1, 2, 2), size_t{260} << 20);
  CHECK(plan::cacheBytesPerRank(vm) == plan::kMostCacheBytesPerCpu);
  for (auto& r : vm) r.cpus = 0;
  CHECK(plan::cacheBytesPerRank(vm) == (size_t{130} << 20));

  const auto pair = withCache(interleaved(1, 2, 2), size_t{32} << 20);
  const coll::RankOrder order = plan::rankOrderOf(plan::makePlan(pair));
  const coll::CommLayout cached = coll::layoutOf(order, 2, plan::ranksPerCpu(pair), plan::cacheBytesPerRank(pair));
  const coll::CommLayout blind = coll::layoutOf(order, 2, 1.0);
  CHECK(cached.cacheBytesPerRank == (size_t{16} << 20));
  const coll::LinkCost link = coll::defaultSharedMemoryCost();
  auto ring = [&](const coll::CommLayout& layout, size_t bytes) {
    return coll::predictUs(link, layout, Collective::AllReduce, Algorithm::Ring, bytes, kF32, 1 << 19);
  };
  const size_t inCache = size_t{2} << 20, beyond = size_t{64} << 20, between = size_t{8} << 20;
  CHECK(ring(cached, inCache) < 0.6 * ring(blind, inCache));
  CHECK(ring(cached, beyond) == ring(blind, beyond));
  CHECK(ring(cached, between) > ring(cached, inCache) * 4 * 1.2);  // the discount fades
  CHECK(ring(cached, between) < ring(blind, between));
  // The cache is the host's, shared however the ranks share the CPUs.
  coll::CommLayout crowded = cached;
  crowded.ranksPerCpu = 2;
  coll::CommLayout crowdedBlind = blind;
  crowdedBlind.ranksPerCpu = 2;
  CHECK(ring(crowded, inCache) < 0.7 * ring(crowdedBlind, inCache));
}

TEST_CASE("cost model: bytes move faster again while the buffers fit in each rank's share of the L2", "[planner][tuner]") {
  using coll::Algorithm;
  using coll::Collective;
  constexpr size_t kL2 = size_t{1280} << 10;
  auto withL2 = [](std::vector<plan::RankPlacement> ranks, int cores) {
    for (auto& r : ranks) {
      r.privateCacheBytes = kL2;
      r.cores = cores;
      r.cacheBytes = size_t{48} << 20;
    }
    return ranks;
  };
  // A core's L2 is a rank's own while the host has a core for each rank (2 cores of 2 threads
  // each for 2 ranks), and a share of it where the ranks outnumber the cores; with the cores
  // unknown, the CPUs stand for them. The least share of any host counts, and one rank's
  // unknown L2 leaves it unknown.
  CHECK(plan::privateCacheBytesPerRank(withL2(interleaved(1, 2, 4), 2)) == kL2);
  CHECK(plan::privateCacheBytesPerRank(withL2(interleaved(1, 4, 4), 2)) == kL2 / 2);
  CHECK(plan::privateCacheBytesPerRank(withL2(interleaved(1, 8, 2), 2)) == kL2 / 4);
  CHECK(plan::privateCacheBytesPerRank(withL2(interleaved(1, 8, 2), 0)) == kL2 / 4);
  auto mixed = withL2(interleaved(2, 4, 4), 4);
  mixed.back().privateCacheBytes = size_t{256} << 10;
  CHECK(plan::privateCacheBytesPerRank(mixed) == (size_t{256} << 10));
  mixed.front().privateCacheBytes = 0;
  CHECK(plan::privateCacheBytesPerRank(mixed) == 0);
  // A host whose L2s are its last level: its cache share is the L2's already, no second level.
  topo::HostTopology l2Last;
  l2Last.cacheBytes = 4 * kL2;
  l2Last.privateCacheBytes = kL2;
  l2Last.cores = l2Last.pus = 4;
  CHECK(plan::placeRank(l2Last, -1, -1, 0).privateCacheBytes == 0);
  l2Last.cacheBeyondPrivate = true;
  CHECK(plan::placeRank(l2Last, -1, -1, 0).privateCacheBytes == kL2);

  // 2 ranks with 1.25 MiB of L2 each: a send and a receive buffer of 128 KiB take a fifth of it,
  // at the L2's rate; of 640 KiB, all of it, at the L3's; of 320 KiB, half, in between.
  const auto pair = withL2(interleaved(1, 2, 2), 2);
  const coll::RankOrder order = plan::rankOrderOf(plan::makePlan(pair));
  const coll::CommLayout l2 = plan::commLayoutOf(order, pair);
  const coll::CommLayout l3Only = coll::layoutOf(order, 2, plan::ranksPerCpu(pair), plan::cacheBytesPerRank(pair));
  REQUIRE(l2.privateCacheBytesPerRank == kL2);
  // The defaults add no L2 discount (see defaultSharedMemoryCost); WEFT_TUNE=measure fits one.
  CHECK(coll::defaultSharedMemoryCost().inPrivateCacheFactor == 1);
  coll::LinkCost shm = coll::defaultSharedMemoryCost();
  shm.inPrivateCacheFactor = 0.72;
  auto ring = [&](const coll::CommLayout& layout, size_t bytes) {
    return coll::predictUs(shm, layout, Collective::AllReduce, Algorithm::Ring, bytes, kF32, 1 << 19);
  };
  // A 2-rank ring's price is two messages and the bytes: the discount applies to the bytes.
  auto bytesPart = [&](const coll::CommLayout& layout, size_t bytes) {
    return ring(layout, bytes) - ring(layout, 8);
  };
  const size_t inL2 = size_t{128} << 10, between = size_t{320} << 10, pastL2 = kL2 / 2;
  CHECK(bytesPart(l2, inL2) == Approx(shm.inPrivateCacheFactor * bytesPart(l3Only, inL2)).epsilon(0.01));
  CHECK(ring(l2, pastL2) == ring(l3Only, pastL2));
  CHECK(bytesPart(l2, between) > bytesPart(l2, inL2) * 2.5 * 1.1);  // the discount fades
  CHECK(ring(l2, between) < ring(l3Only, between));
  // The L2 discount multiplies the L3's: both apply while the buffers fit in both.
  coll::CommLayout blind = l3Only;
  blind.cacheBytesPerRank = 0;
  CHECK(ring(l2, inL2) < ring(l3Only, inL2));
  CHECK(ring(l3Only, inL2) < ring(blind, inL2));
}

TEST_CASE("cost model: WEFT_TUNE=measure times only buffers it has, none over 64 MiB", "[tuner]") {
  constexpr size_t kMiB = size_t{1} << 20;
  auto layout = [](int nranks, int cpus, size_t l3, size_t l2) {
    auto ranks = interleaved(1, nranks, cpus);
    for (auto& r : ranks) {
      r.cacheBytes = l3;
      r.privateCacheBytes = l2;
    }
    coll::CommLayout out = plan::commLayoutOf(plan::rankOrderOf(plan::makePlan(ranks)), ranks);
    out.arenaBytes = coll::kArenaMaxBytes;
    return out;
  };
  const coll::LinkCost shm = coll::defaultSharedMemoryCost();
  auto sane = [](const coll::FitTimingBytes& t) {
    for (size_t bytes : {t.inL2, t.inCache, t.beyondCache}) {
      CHECK(bytes <= 64 * kMiB);
      CHECK(bytes <= t.largest);
    }
    CHECK(t.largest >= coll::kArenaMaxBytes);
  };
  // 2 ranks on the 2-vCPU Xeon VM (48 MiB of L3, counted as 16 MiB a CPU; 1.25 MiB of L2):
  // 160 KiB in the L2, 4 MiB in the cache, 32 MiB beyond it.
  const coll::FitTimingBytes vm = coll::fitTimingBytes(shm, layout(2, 2, 48 * kMiB, 1280 << 10));
  CHECK(vm.inL2 == (size_t{160} << 10));
  CHECK(vm.inCache == 4 * kMiB);
  CHECK(vm.beyondCache == 32 * kMiB);
  CHECK(vm.largest == 32 * kMiB);
  sane(vm);
  // A cache too large to time in or beyond (1 GiB over 2 ranks whose CPUs are unknown): only
  // the L2 call, and the buffers are sized for it.
  const coll::FitTimingBytes huge = coll::fitTimingBytes(shm, layout(2, 0, 1024 * kMiB, kMiB));
  CHECK(huge.inCache == 0);
  CHECK(huge.beyondCache == 0);
  CHECK(huge.inL2 == (size_t{128} << 10));
  sane(huge);
  // 8 ranks on 2 CPUs: a 40 KiB call would be timed by its messages, not its bytes.
  const coll::FitTimingBytes crowded = coll::fitTimingBytes(shm, layout(8, 2, 48 * kMiB, 1280 << 10));
  CHECK(crowded.inL2 == 0);
  sane(crowded);
  // An L2 share no smaller than the cache call's buffers: the cache call stands for both.
  const coll::FitTimingBytes small = coll::fitTimingBytes(shm, layout(2, 2, kMiB, 2 * kMiB));
  CHECK(small.inL2 == 0);
  sane(small);
  // Sockets: no cache discount to fit.
  const coll::FitTimingBytes socket = coll::fitTimingBytes(coll::defaultSocketCost(), layout(2, 2, 48 * kMiB, kMiB));
  CHECK(socket.inL2 == 0);
  CHECK(socket.inCache == 0);
  CHECK(socket.beyondCache == 32 * kMiB);
  sane(socket);
}

TEST_CASE("cost model: the INFO line names every algorithm a collective has, at the model's price", "[tuner]") {
  using coll::Algorithm;
  using coll::Collective;
  const auto pair = interleaved(1, 2, 2);
  const coll::CommLayout layout = coll::layoutOf(plan::rankOrderOf(plan::makePlan(pair)), 2, 1.0);
  const coll::LinkCost link = coll::defaultSharedMemoryCost();
  const coll::TuningConfig config;
  const size_t bytes = size_t{1} << 20;
  const std::string line = coll::describePredictions(config, link, layout, Collective::AllReduce, bytes, kF32);
  for (Algorithm a : {Algorithm::Ring, Algorithm::Tree, Algorithm::RecursiveDoubling, Algorithm::OneShot}) {
    const std::string expected =
        formatString("%s %.1f us", coll::algorithmName(a),
                     coll::predictUs(link, layout, Collective::AllReduce, a, bytes, kF32, config.pipeline.chunkBytes));
    CHECK(line.find(expected) != std::string::npos);
  }
  CHECK(line.find("direct") == std::string::npos);
  CHECK(coll::describePredictions(config, link, layout, Collective::AllGather, bytes, kF32).rfind("ring ", 0) == 0);
}

TEST_CASE("cost model: WEFT_TUNE=measure's fit recovers the link and arena costs the timings came from", "[tuner]") {
  using coll::Algorithm;
  using coll::Collective;
  for (int cpus : {2, 8}) {  // crowded (4 ranks on 2 CPUs) and not
    auto ranks = interleaved(1, 4, cpus);
    for (auto& r : ranks) {
      r.cacheBytes = size_t{32} << 20;
      r.privateCacheBytes = size_t{2} << 20;
      r.cores = cpus;
    }
    coll::CommLayout layout = plan::commLayoutOf(plan::rankOrderOf(plan::makePlan(ranks)), ranks);
    layout.arenaBytes = coll::kArenaMaxBytes;
    const coll::LinkCost truth{0.7, 1.0 / 9000.0, 1.0 / 20000.0, 0.6, 0.7};
    coll::CommLayout truthLayout = layout;
    truthLayout.arenaLink = {0.3, 1.0 / 12000.0, 0.0};
    truthLayout.treeHopCrowding = 1.9;
    const size_t chunk = coll::kSharedMemoryChunkBytes;
    auto timed = [&](Algorithm a, size_t bytes) {
      return coll::Timing{bytes, coll::predictUs(truth, truthLayout, Collective::AllReduce, a, bytes, kF32, chunk)};
    };
    const size_t share = layout.cacheBytesPerRank;
    const coll::MeasuredAllReduce measured{timed(Algorithm::Ring, 1024),
                                           timed(Algorithm::Ring, share / 4),
                                           timed(Algorithm::Ring, 2 * share),
                                           timed(Algorithm::OneShot, 8),
                                           timed(Algorithm::OneShot, coll::kArenaMaxBytes),
                                           timed(Algorithm::Tree, 1024),
                                           timed(Algorithm::Ring, layout.privateCacheBytesPerRank / 8)};
    // From the defaults; the defaults' beta/gamma ratio is kept, so gamma is compared as beta + gamma.
    const coll::FittedCosts fit = coll::fitAllReduce(coll::defaultSharedMemoryCost(), layout, chunk, measured);
    CAPTURE(cpus, fit.link.alphaUs, fit.link.betaUsPerB, fit.link.inCacheFactor, fit.link.inPrivateCacheFactor,
            fit.arena.alphaUs);
    coll::CommLayout fitLayout = layout;
    fitLayout.arenaLink = fit.arena;
    CHECK(fit.link.inPrivateCacheFactor == Approx(truth.inPrivateCacheFactor).epsilon(0.03));
    for (const coll::Timing& t : {measured.ringSmall, measured.ringPrivate, measured.ringCached, measured.ringMemory}) {
      CHECK(coll::predictUs(fit.link, fitLayout, Collective::AllReduce, Algorithm::Ring, t.bytes, kF32, chunk) ==
            Approx(t.us).epsilon(0.03));
    }
    for (const coll::Timing& t : {measured.arenaSmall, measured.arenaLarge}) {
      CHECK(coll::predictUs(fit.link, fitLayout, Collective::AllReduce, Algorithm::OneShot, t.bytes, kF32, chunk) ==
            Approx(t.us).epsilon(0.03));
    }
    CHECK(fit.link.inCacheFactor < 1.0);
    // The tree's crowding only where ranks share CPUs: elsewhere a hop's wait does not grow.
    if (cpus == 2) {
      fitLayout.treeHopCrowding = fit.treeHopCrowding;
      CHECK(fit.treeHopCrowding == Approx(1.9).epsilon(0.03));
      CHECK(coll::predictUs(fit.link, fitLayout, Collective::AllReduce, Algorithm::Tree, 1024, kF32, chunk) ==
            Approx(measured.treeSmall.us).epsilon(0.03));
    } else {
      CHECK(fit.treeHopCrowding == coll::kHopCrowding);
    }
  }
  // Timings a 2-rank communicator took at init on the 2-core VM (WEFT_DEBUG=INFO's "timed at
  // init" line, 2026-11-27): the fit must give back every one of them, the small call's too,
  // whose prediction a single pass in turn left 10% short.
  {
    auto ranks = interleaved(1, 2, 2);
    for (auto& r : ranks) r.cacheBytes = size_t{32} << 20;
    coll::CommLayout layout = plan::commLayoutOf(plan::rankOrderOf(plan::makePlan(ranks)), ranks);
    layout.arenaBytes = coll::kArenaMaxBytes;
    const coll::MeasuredAllReduce vm{{1024, 0.8}, {size_t{4} << 20, 247.7}, {size_t{32} << 20, 3961.6},
                                     {8, 0.11}, {coll::kArenaMaxBytes, 2.79}};
    const size_t chunk = coll::kSharedMemoryChunkBytes;
    const coll::FittedCosts fit = coll::fitAllReduce(coll::defaultSharedMemoryCost(), layout, chunk, vm);
    CAPTURE(fit.link.alphaUs, fit.link.betaUsPerB, fit.link.inCacheFactor);
    for (const coll::Timing& t : {vm.ringSmall, vm.ringCached, vm.ringMemory}) {
      CAPTURE(t.bytes);
      CHECK(coll::predictUs(fit.link, layout, Collective::AllReduce, Algorithm::Ring, t.bytes, kF32, chunk) ==
            Approx(t.us).epsilon(0.03));
    }
  }
  // A host whose last-level cache is too large to time beyond (260 MiB for 2 ranks whose CPUs
  // are unknown, so that nothing caps it): only the small call and one in the cache are timed.
  // They set alpha and the per-byte costs; the discount stays, so the memory's rate is the
  // cached one over it.
  {
    auto ranks = interleaved(1, 2, 2);
    for (auto& r : ranks) {
      r.cacheBytes = size_t{260} << 20;
      r.cpus = 0;
    }
    coll::CommLayout layout = plan::commLayoutOf(plan::rankOrderOf(plan::makePlan(ranks)), ranks);
    const coll::LinkCost truth{0.9, 1.0 / 3000.0, 1.0 / 6000.0, coll::defaultSharedMemoryCost().inCacheFactor};
    const size_t chunk = coll::kSharedMemoryChunkBytes;
    auto timed = [&](size_t bytes) {
      return coll::Timing{bytes,
                          coll::predictUs(truth, layout, Collective::AllReduce, Algorithm::Ring, bytes, kF32, chunk)};
    };
    coll::MeasuredAllReduce measured;
    measured.ringSmall = timed(1024);
    measured.ringCached = timed(layout.cacheBytesPerRank / 4);
    const coll::FittedCosts fit = coll::fitAllReduce(coll::defaultSharedMemoryCost(), layout, chunk, measured);
    CAPTURE(fit.link.alphaUs, fit.link.betaUsPerB, fit.link.inCacheFactor);
    CHECK(fit.link.inCacheFactor == coll::defaultSharedMemoryCost().inCacheFactor);
    CHECK(fit.link.betaUsPerB == Approx(truth.betaUsPerB).epsilon(0.03));
    for (size_t bytes : {size_t{1024}, size_t{1} << 20, layout.cacheBytesPerRank / 4, layout.cacheBytesPerRank}) {
      CAPTURE(bytes);
      CHECK(coll::predictUs(fit.link, layout, Collective::AllReduce, Algorithm::Ring, bytes, kF32, chunk) ==
            Approx(timed(bytes).us).epsilon(0.03));
    }
  }
  // Nothing timed: nothing changes.
  const auto pair = interleaved(1, 2, 2);
  const coll::CommLayout layout = coll::layoutOf(plan::rankOrderOf(plan::makePlan(pair)), 2, 1.0);
  const coll::FittedCosts same = coll::fitAllReduce(coll::defaultSharedMemoryCost(), layout, 1 << 17, {});
  CHECK(same.link.alphaUs == coll::defaultSharedMemoryCost().alphaUs);
  CHECK(same.arena.alphaUs == coll::arenaCost().alphaUs);
  // Sockets have no cache discount, and a timing in the cache does not give them one.
  coll::CommLayout cachedLayout = layout;
  cachedLayout.cacheBytesPerRank = size_t{16} << 20;
  coll::MeasuredAllReduce inCache;
  inCache.ringCached = {size_t{4} << 20, 1.0};
  CHECK(coll::fitAllReduce(coll::defaultSocketCost(), cachedLayout, 1 << 19, inCache).link.inCacheFactor == 1.0);
  cachedLayout.privateCacheBytesPerRank = size_t{2} << 20;
  inCache.ringPrivate = {size_t{256} << 10, 1.0};
  CHECK(coll::fitAllReduce(coll::defaultSocketCost(), cachedLayout, 1 << 19, inCache).link.inPrivateCacheFactor == 1.0);
}
