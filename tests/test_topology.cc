// Topology discovery (hwloc) on the fixtures in tests/topo/ and on this machine, and the
// planner's properties for every fixture and layout: every rank once per ring, one crossing per
// host per ring, each GPU's NIC the nearest, valid double binary trees with disjoint interiors,
// the same plan from every rank's point of view.
#include <catch2/catch.hpp>

#include <sched.h>
#include <unistd.h>

#include <cctype>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/rails.h"
#include "plan/placement.h"
#include "plan/planner.h"
#include "topo/pci_bus_id.h"
#include "topo/topology.h"

using namespace weft;

namespace {

std::string fixture(const char* name) { return std::string(WEFT_TOPO_FIXTURES) + "/" + name; }

topo::HostTopology load(const char* name) {
  auto t = topo::loadTopologyXml(fixture(name));
  INFO((t.isOk() ? std::string() : t.status().message()));
  REQUIRE(t.isOk());
  return t.value();
}

// hosts x ranksPerHost ranks, every host like `host`, as weft-topo lays them out.
std::vector<plan::RankPlacement> layout(const topo::HostTopology& host, int hosts, int ranksPerHost) {
  return plan::layoutHosts(host, hosts, ranksPerHost, true);
}

int depthOf(const plan::Tree& t, int node) {
  int d = 0;
  for (int r = node; t.parent[static_cast<size_t>(r)] >= 0; r = t.parent[static_cast<size_t>(r)]) {
    if (++d > static_cast<int>(t.parent.size())) return INT_MAX;  // a cycle
  }
  return d;
}

}  // namespace

TEST_CASE("topology: the fixtures load with their devices", "[topology]") {
  auto laptop = load("laptop.xml");
  CHECK(laptop.packages == 1);
  CHECK(laptop.numaNodes.size() == 1);
  CHECK(laptop.pus == 8);
  CHECK(laptop.cacheBytes == (size_t{8} << 20));
  CHECK(laptop.privateCacheBytes == size_t{256} << 10);  // one core's L2
  CHECK(laptop.cacheBeyondPrivate);                     // and an L3 beyond it
  CHECK(laptop.gpus.empty());
  REQUIRE(laptop.nics.size() == 1);
  CHECK(laptop.nics[0].name == "eth0");
  CHECK(laptop.nics[0].netdev == "eth0");

  auto server = load("server-2s.xml");
  CHECK(server.packages == 2);
  REQUIRE(server.numaNodes.size() == 2);
  REQUIRE(server.nics.size() == 2);
  CHECK(server.nics[0].numaNode == 0);
  CHECK(server.nics[1].numaNode == 1);
  CHECK(server.numaOfCpu(20) == 1);
  CHECK(server.cacheBytes == (size_t{64} << 20));  // both packages' L3s: the host's ranks share them
  CHECK(server.privateCacheBytes == size_t{1} << 20);

  auto gpu = load("gpu8-nic4.xml");
  CHECK(gpu.privateCacheBytes == 0);  // no L2 described: unknown
  REQUIRE(gpu.gpus.size() == 8);
  REQUIRE(gpu.nics.size() == 4);
  for (size_t g = 0; g < 8; ++g) {
    CHECK(gpu.gpus[g].name == "cuda" + std::to_string(g));
    CHECK(gpu.gpus[g].numaNode == static_cast<int>(g / 4));
  }
  CHECK(gpu.nics[2].name == "mlx5_2");
  CHECK(gpu.nics[2].netdev == "ib2");  // IPoIB: where the rail's sockets go
  // Same switch: up one port, down another. Same socket, other switch: two more. Across sockets:
  // no common bridge.
  CHECK(topo::pciDistance(gpu.gpus[0], gpu.nics[0]) == 2);
  CHECK(topo::pciDistance(gpu.gpus[0], gpu.nics[1]) == 4);
  CHECK(topo::pciDistance(gpu.gpus[0], gpu.nics[3]) >= topo::kCrossHostBridge);
  CHECK(topo::pciDistance(gpu.gpus[5], gpu.gpus[5]) == 0);

  // A management port sorts after the fabric NICs, though its bus id is the lowest: channel c
  // uses NIC c, and the GPUs' nearest NICs keep their indices.
  auto managed = load("gpu8-nic4-mgmt.xml");
  REQUIRE(managed.nics.size() == 5);
  for (size_t k = 0; k < 4; ++k) {
    CHECK(managed.nics[k].name == "mlx5_" + std::to_string(k));
    CHECK(managed.nics[k].rdma);
  }
  CHECK(managed.nics[4].name == "eno1");
  CHECK_FALSE(managed.nics[4].rdma);
  CHECK(managed.nics[4].linkGBps < managed.nics[0].linkGBps);

  // A memory-only NUMA node (CXL): hwloc gives it every CPU's locality, but no CPU is its own,
  // and it does not make the NICs' nodes unknown. An FPGA (class 0x1200, Xilinx) is no GPU.
  auto cxl = load("server-2s-cxl.xml");
  REQUIRE(cxl.numaNodes.size() == 3);
  CHECK(cxl.numaNodes[0].cpus.size() == 16);
  CHECK(cxl.numaNodes[1].cpus.size() == 16);
  CHECK(cxl.numaNodes[2].cpus.empty());
  CHECK(cxl.numaOfCpu(20) == 1);
  REQUIRE(cxl.nics.size() == 2);
  CHECK(cxl.nics[0].numaNode == 0);
  CHECK(cxl.nics[1].numaNode == 1);
  CHECK(cxl.gpus.empty());
  for (const auto& r : plan::layoutHosts(cxl, 1, 6, true)) CHECK(r.numaNode != 2);

  // A management port beside one fabric NIC (an Ethernet one with RDMA) carries nothing.
  auto mgmt = load("server-nic-mgmt.xml");
  REQUIRE(mgmt.nics.size() == 2);
  CHECK(mgmt.nics[0].name == "mlx5_0");
  CHECK(mgmt.fabricNicCount() == 1);
  CHECK(managed.fabricNicCount() == 4);
  CHECK(topo::describeTopology(managed).find("NICs 4 and on carry no traffic") != std::string::npos);
  CHECK(topo::describeTopology(gpu).find("carry no traffic") == std::string::npos);
  CHECK(gpu.fabricNicCount() == 4);
  CHECK(laptop.fabricNicCount() == 1);
  // RDMA NICs of one kind carry traffic down to a quarter of the fastest one's link.
  auto speeds = load("server-rdma-speeds.xml");
  REQUIRE(speeds.nics.size() == 3);
  CHECK(speeds.nics[2].name == "mlx5_2");
  CHECK(speeds.fabricNicCount() == 2);
  CHECK(topo::describeTopology(speeds).find("NICs 2 and on carry no traffic") != std::string::npos);

  // Every device on a root port of its own: a NIC on the GPU's socket is nearer than one across.
  auto rootPorts = load("gpu4-root-ports.xml");
  REQUIRE(rootPorts.nics.size() == 2);
  CHECK(topo::pciDistance(rootPorts.gpus[2], rootPorts.nics[1]) <
        topo::pciDistance(rootPorts.gpus[2], rootPorts.nics[0]));

  auto quiet = load("no-nic.xml");
  CHECK(quiet.nics.empty());
  CHECK(quiet.gpus.empty());
  CHECK(quiet.cacheBytes == 0);  // none described: unknown
  CHECK_FALSE(quiet.cacheBeyondPrivate);
}

TEST_CASE("topology: a runtime's GPU is found by its PCI bus id, however the id is written", "[topology]") {
  CHECK(topo::parsePciBusId("0000:3b:00.0") == topo::PciAddress{0, 0x3b, 0, 0});
  CHECK(topo::parsePciBusId("00000001:3B:1f.7") == topo::PciAddress{1, 0x3b, 0x1f, 7});  // NVML's 8-digit domain
  for (const char* bad : {"", "3b:00.0", "0000:3b:00", "0000:3b:00.0 ", "0000:13b:00.0", "000000000:3b:00.0",
                          "0000:3b:00.x", "0000:-1:00.0"}) {
    CHECK_FALSE(topo::parsePciBusId(bad).has_value());
  }
  auto host = load("gpu8-nic4.xml");
  REQUIRE(host.gpus.size() == 8);
  for (size_t g = 0; g < host.gpus.size(); ++g) {
    std::string upper = host.gpus[g].busId;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    CHECK(topo::gpuIndexByBusId(host, upper) == static_cast<int>(g));
    CHECK(topo::gpuIndexByBusId(host, "0000" + host.gpus[g].busId) == static_cast<int>(g));
    // Found this way, the GPU sends by its nearest NIC: the one behind its own PCI switch.
    const int gpu = topo::gpuIndexByBusId(host, host.gpus[g].busId);
    const plan::RankPlacement p = plan::placeRank(host, host.gpus[g].numaNode, gpu, 0);
    CHECK(p.gpu == static_cast<int>(g));
    CHECK(topo::pciDistance(host.gpus[g], host.nics[static_cast<size_t>(p.preferredNic)]) == 2);
  }
  CHECK(topo::gpuIndexByBusId(host, "0000:ff:00.0") == -1);
  CHECK(topo::gpuIndexByBusId(host, "") == -1);
  CHECK(topo::gpuIndexByBusId(load("laptop.xml"), "0000:3b:00.0") == -1);
}

TEST_CASE("topology: missing and malformed files are clear errors", "[topology]") {
  auto missing = topo::loadTopologyXml("/nonexistent/topo.xml");
  REQUIRE_FALSE(missing.isOk());
  CHECK(missing.status().code() == weftInvalidArgument);
  CHECK(missing.status().message().find("/nonexistent/topo.xml") != std::string::npos);

  char path[] = "/tmp/weft-topo-XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  const char junk[] = "<topology><object type=";
  REQUIRE(write(fd, junk, sizeof(junk) - 1) == static_cast<ssize_t>(sizeof(junk) - 1));
  close(fd);
  auto malformed = topo::loadTopologyXml(path);
  unlink(path);
  REQUIRE_FALSE(malformed.isOk());
  CHECK(malformed.status().code() == weftInvalidArgument);
}

TEST_CASE("topology: live discovery round-trips through WEFT_TOPO_DUMP_FILE and WEFT_TOPO_FILE", "[topology]") {
  char path[] = "/tmp/weft-topo-dump-XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  setenv("WEFT_TOPO_DUMP_FILE", path, 1);
  auto live = topo::discoverTopology();
  unsetenv("WEFT_TOPO_DUMP_FILE");
  INFO((live.isOk() ? topo::describeTopology(live.value()) : live.status().message()));
  REQUIRE(live.isOk());
  CHECK(live.value().pus >= 1);
  CHECK(live.value().pus == static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
  setenv("WEFT_TOPO_FILE", path, 1);
  auto again = topo::discoverTopology();
  unsetenv("WEFT_TOPO_FILE");
  unlink(path);
  REQUIRE(again.isOk());
  CHECK(again.value().pus == live.value().pus);
  CHECK(again.value().numaNodes.size() == live.value().numaNodes.size());
  CHECK(again.value().nics.size() == live.value().nics.size());
  CHECK(again.value().gpus.size() == live.value().gpus.size());
  CHECK(again.value().cacheBytes == live.value().cacheBytes);
}

TEST_CASE("topology: a WEFT_TOPO_DUMP_FILE that cannot be written warns, and discovery goes on", "[topology]") {
  setenv("WEFT_TOPO_DUMP_FILE", "/nonexistent-weft-dir/topo.xml", 1);
  auto live = topo::discoverTopology();
  unsetenv("WEFT_TOPO_DUMP_FILE");
  INFO((live.isOk() ? std::string() : live.status().message()));
  CHECK(live.isOk());
}

TEST_CASE("planner: a million ranks plan without a table of every pair", "[topology][planner]") {
  // 4096 hosts x 256 ranks: the transports are worked out per pair when asked, and counted per
  // host, where an n x n table would need a terabyte.
  const auto host = load("laptop.xml");
  std::vector<plan::RankPlacement> ranks(size_t{4096} * 256, plan::placeRank(host, 0, -1, 0));
  for (size_t r = 0; r < ranks.size(); ++r) ranks[r].host = static_cast<int>(r / 256);
  const auto plan = plan::makePlan(ranks);
  CHECK(plan.hosts == 4096);
  CHECK(plan::transportBetween(plan, ranks, 0, 255) == plan::Transport::Shm);
  CHECK(plan::transportBetween(plan, ranks, 0, 256) == plan::Transport::Socket);
  CHECK(plan::anySocketPair(plan, ranks));
  const std::string text = plan::describePlan(plan, ranks);
  // shm: 4096 * C(256, 2); socket: C(2^20, 2) minus those.
  CHECK(text.find("pairs by transport: shm 133693440 socket 549621596160\n") != std::string::npos);
  CHECK(text.find("device buffers") == std::string::npos);  // no GPUs: nothing to say
}

TEST_CASE("placement: a thread whose CPUs span two NUMA nodes is on neither", "[topology]") {
  cpu_set_t all;
  REQUIRE(sched_getaffinity(0, sizeof all, &all) == 0);
  std::vector<unsigned> allowed;
  for (unsigned c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &all)) allowed.push_back(c);
  }
  if (allowed.size() < 2) {
    WARN("skipped: needs 2 CPUs to run on");
    return;
  }
  // A host whose first two allowed CPUs sit on two nodes.
  weft::topo::HostTopology host;
  host.pus = static_cast<int>(allowed.back()) + 1;
  host.numaNodes = {{0, {allowed[0]}}, {1, {allowed[1]}}};
  for (size_t i = 2; i < allowed.size(); ++i) host.numaNodes[1].cpus.push_back(allowed[i]);
  std::thread([&] {
    CHECK(weft::plan::currentNumaNode(host) == -1);  // unbound: both nodes
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(allowed[1], &one);
    REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);  // this thread only
    CHECK(weft::plan::currentNumaNode(host) == 1);
  }).join();
}

TEST_CASE("planner: rings, NICs, trees and transports on every fixture and layout", "[topology][planner]") {
  for (const char* name : {"laptop.xml", "server-2s.xml", "server-2s-cxl.xml", "gpu8-nic4.xml", "gpu8-nic4-mgmt.xml",
                           "no-nic.xml", "server-nic-mgmt.xml", "gpu4-root-ports.xml", "gpu8-nic8.xml",
                           "server-rdma-speeds.xml"}) {
    const auto host = load(name);
    for (int hosts : {1, 2, 3, 4, 5, 8}) {
      for (int perHost : {1, 2, 4, 8}) {
        DYNAMIC_SECTION(name << ": " << hosts << " host(s) x " << perHost << " rank(s)") {
          const auto ranks = layout(host, hosts, perHost);
          const int n = static_cast<int>(ranks.size());
          const plan::Plan plan = plan::makePlan(ranks);
          INFO(plan::describePlan(plan, ranks));
          CHECK(plan.hosts == hosts);
          const size_t expectChannels =
              hosts > 1 ? std::clamp<size_t>(host.fabricNicCount(), 1, static_cast<size_t>(plan::kMaxChannels)) : 1;
          CHECK(plan.channels.size() == expectChannels);
          for (const auto& channel : plan.channels) {
            // Every rank exactly once; the ring crosses into each host once.
            std::set<int> seen(channel.ring.begin(), channel.ring.end());
            CHECK(static_cast<int>(seen.size()) == n);
            CHECK(static_cast<int>(channel.ring.size()) == n);
            int crossings = 0;
            for (int i = 0; i < n; ++i) {
              crossings += ranks[static_cast<size_t>(channel.ring[static_cast<size_t>(i)])].host !=
                           ranks[static_cast<size_t>(channel.ring[static_cast<size_t>((i + 1) % n)])].host;
            }
            CHECK(crossings == (hosts > 1 ? hosts : 0));
          }
          // Each GPU rank's NIC is a fabric NIC nearest its GPU.
          for (const auto& p : ranks) {
            if (p.gpu < 0 || host.nics.empty()) continue;
            CHECK(p.preferredNic < host.fabricNicCount());
            int best = INT_MAX;
            for (int k = 0; k < host.fabricNicCount(); ++k) {
              best = std::min(best, topo::pciDistance(host.gpus[static_cast<size_t>(p.gpu)], host.nics[static_cast<size_t>(k)]));
            }
            CHECK(topo::pciDistance(host.gpus[static_cast<size_t>(p.gpu)], host.nics[static_cast<size_t>(p.preferredNic)]) == best);
          }
          // Trees: one root, no cycles, parents and children agree, depth ~ log2(hosts) + chain.
          for (const auto& tree : plan.trees) {
            int roots = 0;
            for (int r = 0; r < n; ++r) {
              roots += tree.parent[static_cast<size_t>(r)] < 0;
              CHECK(depthOf(tree, r) <= static_cast<int>(std::ceil(std::log2(hosts))) + 1 + perHost);
              for (int c : tree.children[static_cast<size_t>(r)]) CHECK(tree.parent[static_cast<size_t>(c)] == r);
            }
            CHECK(roots == 1);
          }
          // Within a host the two trees chain its ranks in opposite directions, so that with two
          // ranks on a host each is a leaf in one tree: one rank reducing both halves doubles
          // its work while the other waits.
          for (int r = 0; r < n; ++r) {
            const int up0 = plan.trees[0].parent[static_cast<size_t>(r)];
            if (up0 < 0 || ranks[static_cast<size_t>(up0)].host != ranks[static_cast<size_t>(r)].host) continue;
            CHECK(plan.trees[1].parent[static_cast<size_t>(up0)] == r);
          }
          if (hosts == 1 && perHost == 2) {
            CHECK(plan.trees[0].root != plan.trees[1].root);
          }
          // Transports: shared memory within a host, sockets between hosts; device buffers go
          // over CUDA IPC within a host and are staged between hosts.
          for (int a = 0; a < n; ++a) {
            for (int b = 0; b < n; ++b) {
              const auto t = plan::transportBetween(plan, ranks, a, b);
              const bool sameHost = ranks[static_cast<size_t>(a)].host == ranks[static_cast<size_t>(b)].host;
              const auto want = a == b ? plan::Transport::Self : sameHost ? plan::Transport::Shm : plan::Transport::Socket;
              CHECK(t == want);
              const auto d = plan::deviceTransportBetween(ranks, a, b);
              CHECK(d == (a == b     ? plan::DeviceTransport::Self
                          : sameHost ? plan::DeviceTransport::CudaIpc
                                     : plan::DeviceTransport::Staged));
            }
          }
          // Every rank computes the same plan from the same facts.
          CHECK(plan::describePlan(plan::makePlan(ranks), ranks) == plan::describePlan(plan, ranks));
        }
      }
    }
  }
}

TEST_CASE("planner: a rank that may not use shared memory gets sockets to every peer", "[topology][planner]") {
  // 3 ranks on one host; rank 1 runs with WEFT_SHM_DISABLE=1 (its placement says so).
  std::vector<plan::RankPlacement> ranks(3);
  ranks[1].sharedMemory = false;
  const plan::Plan plan = plan::makePlan(ranks);
  CHECK(plan::transportBetween(plan, ranks, 0, 2) == plan::Transport::Shm);
  CHECK(plan::transportBetween(plan, ranks, 2, 0) == plan::Transport::Shm);
  for (int peer : {0, 2}) {
    CHECK(plan::transportBetween(plan, ranks, 1, peer) == plan::Transport::Socket);
    CHECK(plan::transportBetween(plan, ranks, peer, 1) == plan::Transport::Socket);
  }
  CHECK(plan::anySocketPair(plan, ranks));
  CHECK(plan::describePlan(plan, ranks).find("pairs by transport: shm 1 socket 2\n") != std::string::npos);
  ranks[1].sharedMemory = true;
  CHECK_FALSE(plan::anySocketPair(plan::makePlan(ranks), ranks));
  CHECK(plan::anySocketPair(plan::makePlan(ranks, plan::TransportPolicy::Socket), ranks));
}

TEST_CASE("planner: on 8 GPUs and 4 NICs each channel enters and leaves a host by its NIC's GPUs",
          "[topology][planner]") {
  // With a management port beside the fabric too: it carries no channel.
  for (const char* name : {"gpu8-nic4.xml", "gpu8-nic4-mgmt.xml"}) {
    INFO(name);
    const auto host = load(name);
    const auto ranks = layout(host, 2, 8);
    const auto plan = plan::makePlan(ranks);
    REQUIRE(plan.channels.size() == 4);
    for (int c = 0; c < 4; ++c) {
      const auto& ring = plan.channels[static_cast<size_t>(c)].ring;
      // Host 0's segment ends at GPU 2c and host 1's begins at GPU 2c+1: both beside NIC c.
      CHECK(ranks[static_cast<size_t>(ring[7])].gpu == 2 * c);
      CHECK(ranks[static_cast<size_t>(ring[8])].gpu == 2 * c + 1);
      CHECK(plan.channels[static_cast<size_t>(c)].nic[static_cast<size_t>(ring[7])] == c);
      for (int nic : plan.channels[static_cast<size_t>(c)].nic) CHECK(host.nics[static_cast<size_t>(nic)].rdma);
    }
    for (const auto& p : ranks) CHECK(host.nics[static_cast<size_t>(p.preferredNic)].rdma);
  }
}

TEST_CASE("planner: on 8 GPUs with a NIC each, 8 channels, each entering and leaving a host by its NIC's socket",
          "[topology][planner]") {
  const auto host = load("gpu8-nic8.xml");
  REQUIRE(host.fabricNicCount() == 8);
  const auto ranks = layout(host, 2, 8);
  const auto plan = plan::makePlan(ranks);
  REQUIRE(plan.channels.size() == 8);
  std::set<int> exits;
  for (int c = 0; c < 8; ++c) {
    const auto& channel = plan.channels[static_cast<size_t>(c)];
    // Each host's segment ends at the GPU whose own NIC is c, and the channel uses NIC c there.
    for (const size_t last : {size_t{7}, size_t{15}}) {
      const auto& exit = ranks[static_cast<size_t>(channel.ring[last])];
      CHECK(exit.preferredNic == c);
      CHECK(channel.nic[static_cast<size_t>(channel.ring[last])] == c);
    }
    exits.insert(ranks[static_cast<size_t>(channel.ring[7])].gpu);
    // The other host's traffic enters at a GPU on NIC c's socket (for c = 3 and 7 the GPU after
    // the leaving one is on the other socket: the segment runs the other way round).
    for (const size_t first : {size_t{0}, size_t{8}}) {
      CHECK(ranks[static_cast<size_t>(channel.ring[first])].numaNode == host.nics[static_cast<size_t>(c)].numaNode);
    }
  }
  CHECK(exits.size() == 8);  // every GPU's NIC carries a channel
  // Both hosts' rails for channel c are their NIC c.
  const auto nics = plan::channelNics(plan, ranks, 3, 12);
  REQUIRE(nics.size() == 8);
  for (int c = 0; c < 8; ++c) CHECK(nics[static_cast<size_t>(c)] == std::pair<int, int>(c, c));
}

TEST_CASE("planner: NICs go where the traffic is: no management port, the GPU's own socket, one NIC a GPU",
          "[topology][planner]") {
  // One fabric NIC and a 1 GbE port: one channel, and every rank on the fabric NIC.
  const auto mgmt = load("server-nic-mgmt.xml");
  const auto hostRanks = layout(mgmt, 2, 4);
  const auto mgmtPlan = plan::makePlan(hostRanks);
  CHECK(mgmtPlan.channels.size() == 1);
  for (const auto& p : hostRanks) CHECK(mgmt.nics[static_cast<size_t>(p.preferredNic)].name == "mlx5_0");
  // No switches: each GPU's NIC is its socket's.
  const auto rootPorts = load("gpu4-root-ports.xml");
  for (const auto& p : layout(rootPorts, 1, 4)) {
    CHECK(rootPorts.nics[static_cast<size_t>(p.preferredNic)].numaNode == rootPorts.gpus[static_cast<size_t>(p.gpu)].numaNode);
  }
  // Two GPUs and two NICs under each switch: each GPU a NIC of its own, beside it.
  const auto pairs = load("gpu8-nic8.xml");
  std::set<int> taken;
  for (const auto& p : layout(pairs, 1, 8)) {
    taken.insert(p.preferredNic);
    const auto& gpu = pairs.gpus[static_cast<size_t>(p.gpu)];
    int nearest = INT_MAX;
    for (const auto& nic : pairs.nics) nearest = std::min(nearest, topo::pciDistance(gpu, nic));
    CHECK(topo::pciDistance(gpu, pairs.nics[static_cast<size_t>(p.preferredNic)]) == nearest);
  }
  CHECK(taken.size() == 8);
}

TEST_CASE("rails: a pair on two hosts has a socket stream per channel, each between that channel's NICs",
          "[topology][planner]") {
  const auto host = load("gpu8-nic4.xml");
  const auto ranks = layout(host, 2, 8);
  const auto plan = plan::makePlan(ranks);
  // GPU 2 of host 0 and GPU 5 of host 1: channel c uses NIC c on both hosts.
  const auto nics = plan::channelNics(plan, ranks, 2, 13);
  REQUIRE(nics.size() == 4);
  for (int c = 0; c < 4; ++c) CHECK(nics[static_cast<size_t>(c)] == std::pair<int, int>(c, c));
  CHECK(plan::channelNics(plan, ranks, 13, 2).size() == 4);
  CHECK(plan::channelNics(plan, ranks, 2, 5).empty());  // one host: shared memory, no rails
  const auto oneNic = layout(load("laptop.xml"), 2, 1);
  CHECK(plan::channelNics(plan::makePlan(oneNic), oneNic, 0, 1).empty());  // one channel: no rails

  // Every count of streams rounds up to whole channels, so both ranks of a pair agree.
  CHECK(core::streamCount(nics, 1) == 4);
  CHECK(core::streamCount(nics, 5) == 8);
  CHECK(core::streamCount({}, 3) == 3);

  auto address = [](const char* text) {
    auto a = transport::SocketAddress::parse(text);
    REQUIRE(a.isOk());
    return a.value();
  };
  const auto peerMain = address("10.0.0.2:4000");
  core::RailAddresses mine, peers;
  mine[0] = address("10.0.0.1:5000");
  mine[1] = address("10.1.0.1:5001");
  mine[2] = address("10.2.0.1:5002");  // the peer has no rail on NIC 2, nor either on NIC 3
  peers[0] = peerMain;
  peers[1] = address("10.1.0.2:4001");
  const auto routes = core::streamRoutes(nics, 1, mine, peerMain, peers);
  REQUIRE(routes.size() == 4);
  CHECK(routes[0].destination.toString() == "10.0.0.2:4000");
  REQUIRE(routes[1].source != nullptr);
  CHECK(routes[1].source->toString() == "10.1.0.1:5001");
  CHECK(routes[1].destination.toString() == "10.1.0.2:4001");
  CHECK((routes[1].localNic == 1 && routes[1].peerNic == 1));
  for (size_t s : {2, 3}) {  // no rail at one end: the peer's main address, routed by the kernel
    CHECK(routes[s].source == nullptr);
    CHECK(routes[s].destination.toString() == "10.0.0.2:4000");
  }
  const auto plain = core::streamRoutes({}, 2, mine, peerMain, peers);
  REQUIRE(plain.size() == 2);
  CHECK((plain[0].source == nullptr && plain[1].source == nullptr));
}

TEST_CASE("planner: double binary trees have <= 2 children and disjoint interiors", "[topology][planner]") {
  for (int n = 1; n <= 70; ++n) {
    const auto trees = plan::doubleBinaryTree(n);
    std::set<int> interior[2];
    for (int t = 0; t < 2; ++t) {
      int roots = 0;
      for (int r = 0; r < n; ++r) {
        const auto& kids = trees[static_cast<size_t>(t)].children[static_cast<size_t>(r)];
        CHECK(kids.size() <= 2);
        if (!kids.empty()) interior[t].insert(r);
        roots += trees[static_cast<size_t>(t)].parent[static_cast<size_t>(r)] < 0;
        CHECK(depthOf(trees[static_cast<size_t>(t)], r) <= static_cast<int>(std::ceil(std::log2(n + 1))) + 1);
      }
      CHECK(roots == 1);
    }
    for (int r : interior[0]) {
      INFO("n = " << n << ", node " << r << " is interior in both trees");
      CHECK(interior[1].count(r) == 0);
    }
  }
}
