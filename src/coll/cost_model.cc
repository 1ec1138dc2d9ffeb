#include "coll/cost_model.h"

#include <algorithm>
#include <cmath>

#include "coll/arena_allgather.h"

namespace weft::coll {

// Shared memory: ~1.1 us a message and ~4.5 GB/s through the ring, reductions mostly hidden in
// the copy out of it (reduce on receipt); a little over twice that while the buffers stay in
// the cache. That rate was fitted where most of the cached sizes fit a core's L2 too, so the
// defaults add no L2 discount of their own (on a 2-vCPU Xeon VM with 1.25 MiB of L2 a 0.75
// one made 41 and 38 of 72 predictions good where none made 45:
// bench/results/2026-12-04-tuner-accuracy-intel-vm-l2-defaults.md); WEFT_TUNE=measure fits one
// (0.72 on that VM). Sockets: loopback-class TCP. Both measured on 2-core x86 VMs
// (bench/results/*-tuner-accuracy*.md).
LinkCost defaultSharedMemoryCost() { return {1.1, 1.0 / 4500.0, 1.0 / 10000.0, 0.45}; }
LinkCost defaultSocketCost() { return {15.0, 1.0 / 2500.0, 1.0 / 8000.0}; }
// ~0.5 us for 8 bytes on 2 ranks, then ~7 GB/s per peer's input read and reduced, 1 to 16 KiB
// on 2 and 4 ranks of a quiet 2-core VM (bench/results/2026-11-24-tuner-accuracy*.md): faster
// than the executor's one-shot and the ring up to its 16 KiB limit.
LinkCost arenaCost() { return {0.5, 1.0 / 7000.0, 0.0}; }

CommLayout layoutOf(const RankOrder& order, int nranks, double ranksPerCpu, size_t cacheBytesPerRank,
                    size_t privateCacheBytesPerRank) {
  CommLayout layout;
  layout.nranks = nranks;
  layout.treeDepth = order.treeDepth(nranks);
  layout.treeFanOut = std::max(1, order.treeFanOut(nranks));
  layout.ranksPerCpu = std::max(1.0, ranksPerCpu);
  layout.cacheBytesPerRank = cacheBytesPerRank;
  layout.privateCacheBytesPerRank = privateCacheBytesPerRank;
  return layout;
}

bool runsOnArena(const CommLayout& layout, Collective collective, Algorithm algorithm, size_t bytes) {
  if (algorithm != Algorithm::OneShot || layout.arenaBytes == 0) return false;
  switch (collective) {
    case Collective::AllReduce: return bytes <= layout.arenaBytes;
    case Collective::AllGather:
    case Collective::Broadcast: return true;
    default: return false;
  }
}

namespace {

// How much longer a call through the arena waits for each further rank per CPU: the ranks yet
// to publish must get a CPU (fitted on a quiet 2-core VM with 2, 4 and 8 ranks: about 0.5, 6 and
// 17 us for 8 bytes, 0.5 + 5.5 (k - 1) with the default per-call cost).
constexpr double kArenaCrowding = 11.0;

double arenaWait(const LinkCost& arena, double k) { return arena.alphaUs * (1 + kArenaCrowding * (k - 1)); }

double log2Ceil(int n) { return n <= 1 ? 0.0 : std::ceil(std::log2(static_cast<double>(n))); }

// A pipeline of `hops` links moving `bytes` in chunks: the first chunk crosses every hop, the
// rest stream behind it.
double pipelined(const LinkCost& l, double bytes, double chunk, double hops, double perByte) {
  if (bytes <= 0) return 0;
  const double piece = std::min(bytes, chunk);
  const double chunks = std::ceil(bytes / piece);
  return hops * (l.alphaUs + piece * perByte) + (chunks - 1) * (l.alphaUs + piece * perByte);
}

// The link as k ranks sharing each CPU see it: a hop waits for its receiver to get a CPU,
// 1 + 3.1 log2(k) times as long (fitted on a quiet 2-core VM with 2, 4 and 8 ranks, waits
// spinning 300 us before they sleep: small ring all-reduces of about 2, 28 and 110 us), and
// moving or reducing a byte takes k times as long.
LinkCost crowded(const LinkCost& l, double k) {
  return {l.alphaUs * (1 + kHopCrowding * std::log2(k)), l.betaUsPerB * k, l.gammaUsPerB * k};
}

// The bytes a rank's buffers for `collective` span (b: the shape's bytes, see predictUs).
double footprint(Collective collective, double b, double n) {
  switch (collective) {
    case Collective::AllGather:
    case Collective::ReduceScatter:
    case Collective::AlltoAll:
    case Collective::Gather:
    case Collective::Scatter: return (n + 1) * b;
    default: return 2 * b;  // a send and a receive buffer
  }
}

// `factor` where `bytes` is at most `within`, 1 from `past` on, and a geometric blend between.
double discount(double factor, double bytes, double within, double past) {
  if (within <= 0 || factor >= 1 || bytes >= past) return 1;
  const double beyond = bytes <= within ? 0 : std::log2(bytes / within) / std::log2(past / within);  // 0 .. 1
  return std::pow(factor, 1 - beyond);
}

// The link with its per-byte costs as they are for a footprint of `bytes` per rank: the cached
// rate up to half the rank's cache share, the memory's from twice it; and faster again up to a
// quarter of its L2 share, no faster from the whole of it. The caches are shared by the ranks
// that share them (cacheBytesPerRank and privateCacheBytesPerRank are the shares), so this holds
// where ranks share CPUs too. The L2's discount fades sooner: the shared-memory slots and the
// lines the peers wrote take room there too, and on a 2-vCPU Xeon VM with 1.25 MiB of L2 a
// core, 2-rank all-reduces ran at the L2's rate at 128 KiB (a 256 KiB footprint) and at the
// L3's at 512 KiB (bench/results/2026-12-04-tuner-accuracy-measured-intel-vm-l2.md).
LinkCost forFootprint(const LinkCost& l, const CommLayout& layout, double bytes) {
  const double cache = static_cast<double>(layout.cacheBytesPerRank);
  const double l2 = static_cast<double>(layout.privateCacheBytesPerRank);
  const double scale = discount(l.inCacheFactor, bytes, cache / 2, 2 * cache) *
                       discount(l.inPrivateCacheFactor, bytes, l2 / 4, l2);
  LinkCost scaled = l;
  scaled.betaUsPerB *= scale;
  scaled.gammaUsPerB *= scale;
  return scaled;
}

// What a ring step costs where only some of the n blocks hold an element (count < n): a
// rank whose block is empty neither sends nor receives in that step, so fewer ranks wait to be
// scheduled, but the step still waits for the ones that do. Fitted to 2 elements against 8
// (every block full) on 2-core Xeon VMs, five runs: 0.69-0.75 of the time with 8 ranks (a
// quarter of the blocks full), 0.78-0.83 with 4 (half), both a + (1 - a) x full / n with
// a = 0.62 (bench/results/*-tuner-accuracy-*.md).
double emptyBlockSaving(size_t bytes, size_t elementSize, int nranks) {
  constexpr double kFixed = 0.62;
  const size_t count = bytes / std::max<size_t>(elementSize, 1);
  if (count >= static_cast<size_t>(nranks)) return 1;
  return kFixed + (1 - kFixed) * static_cast<double>(count) / nranks;
}

}  // namespace

double predictUs(const LinkCost& memoryLink, const CommLayout& layout, Collective collective, Algorithm algorithm,
                 size_t bytesIn, size_t elementSize, size_t chunkBytes) {
  const int nranks = layout.nranks;
  const double n = nranks;
  const double b = static_cast<double>(bytesIn);
  const double chunk = static_cast<double>(std::max<size_t>(chunkBytes, 1));
  if (nranks <= 1 || bytesIn == 0) return 0;
  const LinkCost link = forFootprint(memoryLink, layout, footprint(collective, b, n));
  const double k = std::max(1.0, layout.ranksPerCpu);
  const LinkCost l = crowded(link, k);
  const double move = l.betaUsPerB, reduce = l.betaUsPerB + l.gammaUsPerB;
  // Each of n-1 messages sent or received at once costs a rank some software time of its own.
  const double perPeer = 0.75 * link.alphaUs * k;
  const double depth = log2Ceil(nranks);  // of the rooted binary trees
  const double fanOut = std::min(2.0, n - 1);  // children of an interior rooted tree node
  switch (collective) {
    case Collective::AllReduce:
      switch (algorithm) {
        case Algorithm::Ring: {
          // 2(n-1) steps over blocks of b/n, each step's chunks pipelined. With fewer elements
          // than ranks some blocks are empty, and a step sends only the others (emptyBlockSaving).
          const double block = b / n;
          const double steps = (n - 1) * (pipelined(l, block, chunk, 1, reduce) + pipelined(l, block, chunk, 1, move));
          return steps * emptyBlockSaving(bytesIn, elementSize, nranks);
        }
        case Algorithm::RecursiveDoubling: {
          // Each round a rank copies its whole buffer out and its partner's in (to scratch,
          // then reduced): two copies per byte on one core, where a ring hop's copy out and
          // copy in run on two. Where ranks share CPUs the ring's hops lose that too, but a
          // round needs both partners on a CPU at once, where a ring's pipeline keeps every
          // core busy: its wait grows with the square of the crowding. Out of place the input
          // is first copied to the output (the model cannot tell, and prices that case).
          const double pow2 = std::exp2(std::floor(std::log2(n)));
          const double rounds = std::log2(pow2) + (pow2 < n ? 2 : 0);
          return b * move + rounds * (link.alphaUs * k * k + b * (reduce + (k > 1 ? 0 : move)));
        }
        case Algorithm::OneShot: {
          if (runsOnArena(layout, collective, algorithm, bytesIn)) {
            // One copy into the arena, then each peer's input read and reduced. Where ranks
            // share CPUs, a rank waits for the ranks yet to publish (arenaWait), and it reads
            // more slowly, as sqrt(k) (about 7, 5 and 3.5 GB/s per peer's input on 2 cores with
            // 2, 4 and 8 ranks).
            const LinkCost& a = layout.arenaLink;
            return arenaWait(a, k) + (n - 1) * b * a.betaUsPerB * std::sqrt(k);
          }
          // n-1 messages leave at once (the sender copies each), then n-1 reductions.
          return l.alphaUs + (n - 1) * (perPeer + b * (move + l.gammaUsPerB));
        }
        case Algorithm::Tree: {
          // With two ranks each tree is one edge, rooted at either end (the planner chains a
          // host's ranks both ways), and the two trees together move what the ring's two steps
          // move: each rank reduces one half and sends the other.
          if (nranks == 2) {
            return predictUs(memoryLink, layout, collective, Algorithm::Ring, bytesIn, elementSize, chunkBytes);
          }
          // The planned double tree: each half of the buffer up and down its tree in chunks,
          // the two trees' chunks in step (a step moves a chunk of each half: `piece`). A hop is
          // priced as a ring step is, a crowded wait (by the layout's treeHopCrowding), then the
          // receiver's work (the sender's copy overlaps it).
          // - The first step climbs `depth` hops, each parent reducing what its children sent
          //   ((fanOut + 1) / 2 of them on average along the way: a chain's one, a host tree's up
          //   to fanOut), and descends as many, a copy each. Two ranks work at once then, one
          //   per tree, and the waiting ones yield their CPUs (sched_yield while they spin), so
          //   bytes move at the uncrowded rate wherever the host has two CPUs for them (8 ranks
          //   on 2 cores: 128 KiB in 234 us, where the crowded rate would say 560).
          // - Behind it each step costs the busiest rank a reduction and a copy of the whole
          //   piece (a chain's rank is interior in both trees; a double tree's, with fanOut
          //   children in one, is a leaf in the other), at the uncrowded rates; or, where ranks
          //   share CPUs, every rank's work together: the chains' total is the ring's, (n-1)/n
          //   of the piece each, k times over.
          const double f = std::max(1, layout.treeFanOut);
          const double piece = std::min(b, 2 * chunk);
          const double reduceUncrowded = link.betaUsPerB + link.gammaUsPerB, moveUncrowded = link.betaUsPerB;
          const double twoAtOnce = std::max(1.0, 2 * k / n);  // > 1 only with fewer than 2 CPUs
          const double hop = link.alphaUs * (1 + layout.treeHopCrowding * std::log2(k));
          const double fill = std::max(1, layout.treeDepth) *
                              (2 * hop + 0.5 * piece * twoAtOnce * (0.5 * (f + 1) * reduceUncrowded + moveUncrowded));
          const double busiest = piece * (std::max(1.0, f / 2) * reduceUncrowded + moveUncrowded);
          const double shared = (n - 1) / n * piece * (reduce + move);
          return fill + (std::ceil(b / piece) - 1) * (hop + std::max(busiest, shared));
        }
        default: return 1e30;
      }
    case Collective::Broadcast:
    case Collective::Reduce: {
      const double perByte = collective == Collective::Reduce ? reduce : move;
      if (runsOnArena(layout, collective, algorithm, bytesIn)) {
        // Through the arena: per piece a wait (as for the all-gather); the root copies each
        // piece in while the peers copy the one before out, one copy per byte each where a
        // chain's hop copies twice.
        const double slot = static_cast<double>(kArenaSlotBytes);
        const double pieces = std::ceil(b / slot);
        return pieces * arenaWait(layout.arenaLink, k) + 0.5 * (b + std::min(b, slot)) * move;
      }
      if (algorithm == Algorithm::OneShot) return l.alphaUs + (n - 1) * (perPeer + b * move);
      if (algorithm == Algorithm::Tree) return pipelined(l, b, chunk, depth, fanOut * perByte);
      return pipelined(l, b, chunk, n - 1, perByte);  // the chain
    }
    case Collective::AllGather:
    case Collective::ReduceScatter: {
      const double perByte = collective == Collective::ReduceScatter ? reduce : move;
      if (runsOnArena(layout, collective, algorithm, bytesIn)) {
        // Through the arena: per piece a wait for the peers (context switches where ranks share
        // CPUs, as for the arena's all-reduce), and each rank copies its block once in and every
        // peer's once out, n copies where a ring hop's beta covers two (the sender's and the
        // receiver's, on two cores).
        const LinkCost& a = layout.arenaLink;
        const double pieces = std::ceil(b / static_cast<double>(kArenaSlotBytes));
        return pieces * arenaWait(a, k) + 0.5 * n * b * move;
      }
      if (algorithm == Algorithm::OneShot) return l.alphaUs + (n - 1) * (perPeer + b * perByte);
      return (n - 1) * pipelined(l, b, chunk, 1, perByte);  // b is one rank's block
    }
    case Collective::Send:
    case Collective::Recv: return l.alphaUs + b * move;  // one message, to or from one peer
    default:
      return l.alphaUs + (n - 1) * (perPeer + b * l.betaUsPerB);  // direct: a rank's n-1 messages
  }
}

}  // namespace weft::coll
