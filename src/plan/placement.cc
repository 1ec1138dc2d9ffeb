#include "plan/placement.h"

#include <sched.h>

#include <algorithm>
#include <climits>
#include <map>

namespace weft::plan {

RankPlacement placeRank(const topo::HostTopology& host, int numaNode, int gpu, int localRank) {
  RankPlacement p;
  p.numaNode = numaNode;
  p.gpu = gpu >= 0 && gpu < static_cast<int>(host.gpus.size()) ? gpu : -1;
  p.nicCount = host.fabricNicCount();
  p.cpus = host.pus;
  p.cacheBytes = host.cacheBytes;
  // Where the L2s are the last level, cacheBytes counts them already: no second level to price.
  p.privateCacheBytes = host.cacheBeyondPrivate ? host.privateCacheBytes : 0;
  p.cores = host.cores;
  if (p.nicCount == 0) return p;
  const auto fabric = static_cast<size_t>(p.nicCount);
  if (p.gpu >= 0) {
    // The nearest NICs; where several are equally near (two NICs under a GPU pair's switch),
    // the GPUs that share them take them in turn.
    auto nearest = [&](size_t g) {
      std::vector<int> best;
      int least = INT_MAX;
      for (size_t n = 0; n < fabric; ++n) {
        const int d = topo::pciDistance(host.gpus[g], host.nics[n]);
        if (d < least) best.clear();
        if (d <= least) best.push_back(static_cast<int>(n));
        least = std::min(least, d);
      }
      return best;
    };
    const auto mine = nearest(static_cast<size_t>(p.gpu));
    size_t turn = 0;
    for (size_t g = 0; g < static_cast<size_t>(p.gpu); ++g) turn += nearest(g) == mine;
    p.preferredNic = mine[turn % mine.size()];
    return p;
  }
  // Host-memory ranks: spread over the NICs on their NUMA node, else over all of them.
  std::vector<int> local;
  for (size_t n = 0; n < fabric; ++n) {
    if (numaNode >= 0 && host.nics[n].numaNode == numaNode) local.push_back(static_cast<int>(n));
  }
  if (!local.empty()) {
    p.preferredNic = local[static_cast<size_t>(localRank) % local.size()];
  } else {
    p.preferredNic = localRank % p.nicCount;
  }
  return p;
}

std::vector<RankPlacement> layoutHosts(const topo::HostTopology& host, int hosts, int ranksPerHost, bool useGpus) {
  const int gpus = useGpus ? static_cast<int>(host.gpus.size()) : 0;
  std::vector<int> withCpus;
  for (size_t n = 0; n < host.numaNodes.size(); ++n) {
    if (!host.numaNodes[n].cpus.empty()) withCpus.push_back(static_cast<int>(n));
  }
  const long spread = static_cast<long>(withCpus.size());
  std::vector<RankPlacement> ranks;
  ranks.reserve(static_cast<size_t>(hosts) * static_cast<size_t>(std::max(ranksPerHost, 0)));
  for (int h = 0; h < hosts; ++h) {
    for (int l = 0; l < ranksPerHost; ++l) {
      const int gpu = l < gpus ? l : -1;
      const int node = gpu >= 0      ? host.gpus[static_cast<size_t>(gpu)].numaNode
                       : spread == 0 ? -1
                                     : withCpus[static_cast<size_t>(l * spread / ranksPerHost)];
      RankPlacement p = placeRank(host, node, gpu, l);
      p.host = h;
      ranks.push_back(p);
    }
  }
  return ranks;
}

double ranksPerCpu(const std::vector<RankPlacement>& ranks) {
  std::map<int, std::pair<int, int>> hosts;  // host -> (ranks, CPUs)
  for (const RankPlacement& r : ranks) {
    auto& [count, cpus] = hosts[r.host];
    ++count;
    cpus = std::max(cpus, r.cpus);
  }
  double worst = 1;
  for (const auto& [host, load] : hosts) {
    if (load.second > 0) worst = std::max(worst, static_cast<double>(load.first) / load.second);
  }
  return worst;
}

namespace {

// One host's ranks, the most processing units (CPUs or cores) any of them reports, and the
// least cache any reports.
struct HostCache {
  size_t ranks = 0;
  size_t units = 0;
  size_t cacheBytes = 0;
};

// The least `share` of any host, its ranks grouped by RankPlacement::host; 0 without ranks.
template <class Units, class Cache, class Share>
size_t leastShare(const std::vector<RankPlacement>& ranks, Units units, Cache cache, Share share) {
  std::map<int, HostCache> hosts;
  for (const RankPlacement& r : ranks) {
    HostCache& h = hosts[r.host];
    ++h.ranks;
    h.units = std::max(h.units, static_cast<size_t>(std::max(units(r), 0)));
    h.cacheBytes = h.ranks == 1 ? cache(r) : std::min(h.cacheBytes, cache(r));
  }
  size_t least = SIZE_MAX;
  for (const auto& [host, h] : hosts) least = std::min(least, share(h));
  return least == SIZE_MAX ? 0 : least;
}

}  // namespace

size_t cacheBytesPerRank(const std::vector<RankPlacement>& ranks) {
  return leastShare(
      ranks, [](const RankPlacement& r) { return r.cpus; }, [](const RankPlacement& r) { return r.cacheBytes; },
      [](const HostCache& h) {
        const size_t cpus = h.units;
        const size_t usable = cpus > 0 ? std::min(h.cacheBytes, kMostCacheBytesPerCpu * cpus) : h.cacheBytes;
        return usable / std::max(h.ranks, cpus);
      });
}

size_t privateCacheBytesPerRank(const std::vector<RankPlacement>& ranks) {
  return leastShare(
      ranks, [](const RankPlacement& r) { return r.cores > 0 ? r.cores : r.cpus; },
      [](const RankPlacement& r) { return r.privateCacheBytes; },
      [](const HostCache& h) {
        const size_t cores = h.units > 0 ? h.units : h.ranks;  // unknown: a core each
        return h.ranks <= cores ? h.cacheBytes : h.cacheBytes * cores / h.ranks;
      });
}

int currentNumaNode(const topo::HostTopology& host) {
  // Sized for the machine, not CPU_SETSIZE (1024): hosts with more CPUs exist.
  const size_t cpuCount = std::max<size_t>(CPU_SETSIZE, static_cast<size_t>(std::max(host.pus, 0)) * 2);
  cpu_set_t* cpus = CPU_ALLOC(cpuCount);
  if (cpus == nullptr) return -1;
  const size_t bytes = CPU_ALLOC_SIZE(cpuCount);
  int node = -1;
  if (::sched_getaffinity(0, bytes, cpus) == 0) {
    for (unsigned c = 0; c < cpuCount; ++c) {
      if (!CPU_ISSET_S(c, bytes, cpus)) continue;
      const int of = host.numaOfCpu(c);
      if (of < 0 || (node >= 0 && of != node)) {  // unknown, or a second node: not bound to one
        node = -1;
        break;
      }
      node = of;
    }
  }
  CPU_FREE(cpus);
  return node;
}

}  // namespace weft::plan
