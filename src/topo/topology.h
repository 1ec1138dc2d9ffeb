// What one host looks like to Weft: NUMA nodes and their CPUs, GPUs and NICs with where they sit
// on the PCI tree. Discovered with hwloc (I/O devices included), or loaded from an hwloc XML
// file (WEFT_TOPO_FILE, like NCCL_TOPO_FILE); WEFT_TOPO_DUMP_FILE writes what was discovered.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "util/status.h"

namespace weft::topo {

struct PciDevice {
  std::string busId;   // "0000:3b:00.0"
  unsigned vendor = 0;
  unsigned device = 0;
  unsigned pciClass = 0;  // e.g. 0x0302 (3D controller), 0x0200 (Ethernet), 0x0207 (InfiniBand)
  std::string name;       // its OS device ("eth0", "mlx5_0", "cuda0"), or the bus id
  std::string netdev;     // its network interface ("eth0", "ib0"; IPoIB for InfiniBand), "" if none
  int numaNode = -1;      // index into HostTopology::numaNodes of the closest node; -1 unknown
  bool rdma = false;      // it has an OpenFabrics device (InfiniBand, RoCE)
  double linkGBps = 0;    // its PCIe link's speed as hwloc reports it (0: unknown)
  // The bridges from the host bridge down to the device, as hwloc object ids: two devices
  // under the same switch share a longer prefix.
  std::vector<unsigned long long> path;
};

// PCI links between two devices: up from one to their lowest common bridge and down to the
// other. Devices under different host bridges get kCrossHostBridge plus their two paths, and
// kCrossHostBridge more where they are on different NUMA nodes (across the CPU interconnect).
constexpr int kCrossHostBridge = 100;
int pciDistance(const PciDevice& a, const PciDevice& b);

struct NumaNode {
  unsigned osIndex = 0;
  std::vector<unsigned> cpus;  // PU OS indexes
};

struct HostTopology {
  std::string source;  // "live" or the XML file
  int packages = 0;
  int cores = 0;
  int pus = 0;
  // The last-level CPU cache, in bytes: all the L3 caches together (else the L2s), which the
  // ranks of the host share between them; 0 where the topology does not say.
  size_t cacheBytes = 0;
  // The cache a core has to itself: the smallest L2 on the host, in bytes; 0 where the topology
  // describes none.
  size_t privateCacheBytes = 0;
  // Whether cacheBytes counts a level beyond the L2 (the L3s); false where the L2s are the last.
  bool cacheBeyondPrivate = false;
  std::vector<NumaNode> numaNodes;
  std::vector<PciDevice> gpus;
  std::vector<PciDevice> nics;  // RDMA first, then faster links first, then bus order

  // The NUMA node holding `cpu` (an OS index), or -1.
  int numaOfCpu(unsigned cpu) const;
  // How many of the first NICs carry the job's traffic: those of the first's kind (RDMA or not)
  // whose links are at least a quarter as fast. A 1 GbE management port beside a fabric NIC
  // carries none: no channel, and no rank's nearest NIC.
  int fabricNicCount() const;
};

// The live machine, or the file named by WEFT_TOPO_FILE; writes WEFT_TOPO_DUMP_FILE if set.
Result<HostTopology> discoverTopology();
// discoverTopology() once per process (per WEFT_TOPO_FILE value): communicators share it.
Result<std::shared_ptr<const HostTopology>> processTopology();

// An hwloc XML file (as written by lstopo --of xml, hwloc_topology_export_xml or
// WEFT_TOPO_DUMP_FILE).
Result<HostTopology> loadTopologyXml(const std::string& path);

// A few lines for humans (weft-topo, WEFT_DEBUG=INFO).
std::string describeTopology(const HostTopology& topology);

}  // namespace weft::topo
