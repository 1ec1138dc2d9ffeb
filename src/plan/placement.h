// What the planner needs to know about one rank, gathered from every rank at init (fixed size,
// carried in the bootstrap's peer table) so that every rank plans from the same facts.
#pragma once

#include <cstdint>
#include <vector>

#include "topo/topology.h"

namespace weft::plan {

struct RankPlacement {
  int host = 0;          // ranks with the same host identity share an index (first appearance order)
  int numaNode = -1;     // on its host; -1 unknown
  int gpu = -1;          // index into its host's GPUs; -1 none
  int preferredNic = -1; // its host's NIC closest to its GPU (or NUMA node); -1 none
  int nicCount = 0;      // NICs on its host
  int cpus = 0;          // CPUs (hwloc PUs) its host lets it use; 0 unknown
  int cores = 0;         // cores its host lets it use; 0 unknown
  bool sharedMemory = true;  // it may use shared memory (not WEFT_TRANSPORT=socket or WEFT_SHM_DISABLE=1)
  bool sharedMemoryOnly = false;  // every pair of its must use shared memory (WEFT_TRANSPORT=shm)
  size_t cacheBytes = 0;     // its host's last-level cache (topo::HostTopology::cacheBytes); 0 unknown
  // Its host's L2 a core (topo::HostTopology::privateCacheBytes) where an L3 lies beyond it; 0
  // unknown or none.
  size_t privateCacheBytes = 0;
};

// This rank's placement on `host`: its NUMA node from the CPUs it may run on, its GPU (-1 for
// host-memory ranks), and the NIC closest to that GPU by PCI distance, else one on its NUMA
// node, else localRank's share of the host's NICs. host is filled in by the caller.
RankPlacement placeRank(const topo::HostTopology& host, int numaNode, int gpu, int localRank);

// A layout of hosts x ranksPerHost ranks on hosts like `host`, as weft-topo shows one: local
// rank l drives GPU l where the host has that many (and useGpus), and ranks without a GPU
// spread evenly over the NUMA nodes that have CPUs (memory-only nodes, CXL or HBM, run nothing).
std::vector<RankPlacement> layoutHosts(const topo::HostTopology& host, int hosts, int ranksPerHost, bool useGpus);

// Ranks per CPU on the most crowded host (hosts grouped by RankPlacement::host, CPUs as the
// host's ranks report them); 1 where CPUs are unknown.
double ranksPerCpu(const std::vector<RankPlacement>& ranks);
// The cache each rank has to itself on the host where that is least: the host's last-level
// cache over its ranks, or over its CPUs where it has more of those, since the other CPUs' work
// uses the cache too (on a 16-CPU VM with a 300 MiB L3, 2 ranks copied 32-64 MiB at plain-store
// speed as if out of cache: bench/results/2026-11-26-cpu-on-h200-host.md); 0 where any host's
// cache is unknown. A host's cache counts for at most kMostCacheBytesPerCpu per CPU (see there).
size_t cacheBytesPerRank(const std::vector<RankPlacement>& ranks);
// The L2 each rank has to itself on the host where that is least: a core's, or a share of it
// where the host's ranks outnumber its cores (they take turns on them, and on their L2s); with
// the cores unknown, its CPUs stand for them. 0 where any host's L2 is unknown.
size_t privateCacheBytesPerRank(const std::vector<RankPlacement>& ranks);

// No x86 CPU has more last-level cache per core than 12 MiB (AMD's 3D V-Cache parts: 96 MiB over
// 8 cores). A host reporting much more per CPU is a VM given a few CPUs of a larger machine's
// L3, which that machine's other CPUs fill too: a 2-CPU VM reporting 260 MiB copied 32 MiB
// buffers at memory speed in some runs and at cache speed in others, and its direct all-reduce
// of 16-64 MiB ran faster with streaming stores (bench/results/2026-12-02-cache-share-cap.md).
// 16 MiB leaves a margin above the 12, and leaves the 2-CPU VMs that report one 32 MiB L3 (an
// EPYC's, where the cost model's defaults were measured) as they were.
inline constexpr size_t kMostCacheBytesPerCpu = size_t{16} << 20;

// The NUMA node holding every CPU this thread may run on, or -1: unbound (CPUs on several
// nodes) or unknown.
int currentNumaNode(const topo::HostTopology& host);

}  // namespace weft::plan
