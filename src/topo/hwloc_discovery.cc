// HostTopology from hwloc: the live machine or an XML file, I/O devices included.
#include <hwloc.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "topo/topology.h"
#include "util/env.h"
#include "util/log.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define WEFT_LSAN 1
#endif

namespace weft::topo {
namespace {

// hwloc's I/O discovery plugins (libpciaccess behind hwloc_pci) keep a little memory that they
// never free and are unloaded by the time LeakSanitizer looks, so their stacks cannot be named
// in a suppression: allocations made while hwloc discovers are not leak-checked.
struct ThirdPartyAllocations {
#ifdef WEFT_LSAN
  ThirdPartyAllocations() { __lsan_disable(); }
  ~ThirdPartyAllocations() { __lsan_enable(); }
#endif
};

struct TopologyDeleter {
  void operator()(hwloc_topology* t) const { hwloc_topology_destroy(t); }
};
using HwlocTopology = std::unique_ptr<hwloc_topology, TopologyDeleter>;

constexpr unsigned kVendorNvidia = 0x10de, kVendorAmd = 0x1002;

// A device CUDA or HIP can drive: NVIDIA's or AMD's display controllers (0x03: H100s are 3D
// controllers) and processing accelerators (0x12: AMD Instinct). Another vendor's accelerator
// (an FPGA, a Gaudi) is no GPU of Weft's, and neither is a server's BMC VGA.
bool isGpu(hwloc_obj_t pci) {
  const unsigned base = pci->attr->pcidev.class_id >> 8;
  const unsigned vendor = pci->attr->pcidev.vendor_id;
  return (base == 0x03 || base == 0x12) && (vendor == kVendorNvidia || vendor == kVendorAmd);
}

bool isNic(hwloc_obj_t pci) {
  const unsigned cls = pci->attr->pcidev.class_id;
  return cls == 0x0200 || cls == 0x0207;  // Ethernet, InfiniBand
}

std::string busIdOf(hwloc_obj_t pci) {
  const auto& a = pci->attr->pcidev;
  return formatString("%04x:%02x:%02x.%01x", a.domain, a.bus, a.dev, a.func);
}

// The device's OS name: an OpenFabrics device first (mlx5_0), then a network or GPU device.
std::string osNameOf(hwloc_obj_t pci) {
  std::string best;
  int bestRank = 99;
  for (hwloc_obj_t child = pci->io_first_child; child != nullptr; child = child->next_sibling) {
    if (child->type != HWLOC_OBJ_OS_DEVICE || child->name == nullptr) continue;
    int rank = 5;
    switch (child->attr->osdev.type) {
      case HWLOC_OBJ_OSDEV_OPENFABRICS: rank = 0; break;
      case HWLOC_OBJ_OSDEV_COPROC: rank = 1; break;
      case HWLOC_OBJ_OSDEV_NETWORK: rank = 2; break;
      case HWLOC_OBJ_OSDEV_GPU: rank = 3; break;
      default: break;
    }
    if (rank < bestRank) {
      bestRank = rank;
      best = child->name;
    }
  }
  return best.empty() ? busIdOf(pci) : best;
}

// The device's network interface (a NETWORK OS device), or "".
std::string netdevOf(hwloc_obj_t pci) {
  for (hwloc_obj_t child = pci->io_first_child; child != nullptr; child = child->next_sibling) {
    if (child->type == HWLOC_OBJ_OS_DEVICE && child->name != nullptr && child->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK) {
      return child->name;
    }
  }
  return "";
}

PciDevice describePci(hwloc_topology_t t, hwloc_obj_t pci, const std::vector<NumaNode>& nodes) {
  PciDevice d;
  d.busId = busIdOf(pci);
  d.vendor = pci->attr->pcidev.vendor_id;
  d.device = pci->attr->pcidev.device_id;
  d.pciClass = pci->attr->pcidev.class_id;
  d.name = osNameOf(pci);
  d.netdev = netdevOf(pci);
  d.linkGBps = pci->attr->pcidev.linkspeed;
  for (hwloc_obj_t child = pci->io_first_child; child != nullptr; child = child->next_sibling) {
    d.rdma = d.rdma || (child->type == HWLOC_OBJ_OS_DEVICE && child->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS);
  }
  for (hwloc_obj_t up = pci->parent; up != nullptr && up->type == HWLOC_OBJ_BRIDGE; up = up->parent) {
    d.path.insert(d.path.begin(), up->gp_index);
  }
  // The closest NUMA node: the one with CPUs in the nodeset of the device's non-I/O ancestor
  // (memory-only nodes there are local to every device below); unknown where several have CPUs
  // (a device hwloc could only attach to the whole machine).
  hwloc_obj_t cpuSide = hwloc_get_non_io_ancestor_obj(t, pci);
  if (cpuSide != nullptr && cpuSide->nodeset != nullptr) {
    int withCpus = 0;
    for (size_t n = 0; n < nodes.size(); ++n) {
      if (nodes[n].cpus.empty() || !hwloc_bitmap_isset(cpuSide->nodeset, nodes[n].osIndex)) continue;
      d.numaNode = ++withCpus == 1 ? static_cast<int>(n) : -1;
    }
  }
  return d;
}

// The NUMA nodes, each with the PUs that are its own. hwloc gives a node without CPUs (CXL or
// HBM memory) the cpuset of the object it hangs from, so a PU can lie in several nodes'
// cpusets: its own node is the one with the fewest PUs, the lowest OS index on a tie (Linux
// numbers memory-only nodes after the others). Memory-only nodes end up with no PUs.
std::vector<NumaNode> numaNodesOf(hwloc_topology_t t) {
  std::vector<hwloc_obj_t> objects;
  for (hwloc_obj_t node = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_NUMANODE, nullptr); node != nullptr;
       node = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_NUMANODE, node)) {
    objects.push_back(node);
  }
  std::vector<NumaNode> nodes(objects.size());
  for (size_t n = 0; n < objects.size(); ++n) nodes[n].osIndex = objects[n]->os_index;
  for (hwloc_obj_t pu = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_PU, nullptr); pu != nullptr;
       pu = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_PU, pu)) {
    size_t home = objects.size();
    int homeWeight = 0;
    for (size_t n = 0; n < objects.size(); ++n) {
      if (objects[n]->cpuset == nullptr || !hwloc_bitmap_isset(objects[n]->cpuset, pu->os_index)) continue;
      const int weight = hwloc_bitmap_weight(objects[n]->cpuset);
      if (home == objects.size() || weight < homeWeight ||
          (weight == homeWeight && objects[n]->os_index < objects[home]->os_index)) {
        home = n;
        homeWeight = weight;
      }
    }
    if (home < objects.size()) nodes[home].cpus.push_back(pu->os_index);
  }
  for (NumaNode& n : nodes) std::sort(n.cpus.begin(), n.cpus.end());
  return nodes;
}

Result<HostTopology> fromHwloc(hwloc_topology_t t, std::string source) {
  HostTopology h;
  h.source = std::move(source);
  h.packages = std::max(1, hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PACKAGE));
  h.cores = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE);
  h.pus = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU);
  for (hwloc_obj_type_t level : {HWLOC_OBJ_L3CACHE, HWLOC_OBJ_L2CACHE}) {
    for (hwloc_obj_t c = hwloc_get_next_obj_by_type(t, level, nullptr); c != nullptr;
         c = hwloc_get_next_obj_by_type(t, level, c)) {
      if (c->attr != nullptr && __builtin_add_overflow(h.cacheBytes, c->attr->cache.size, &h.cacheBytes)) {
        WEFT_WARN("topology %s: its caches' sizes add up past 2^64 bytes; taken as unknown", h.source.c_str());
        h.cacheBytes = 0;
        break;
      }
    }
    if (h.cacheBytes > 0) {
      h.cacheBeyondPrivate = level == HWLOC_OBJ_L3CACHE;
      break;
    }
  }
  for (hwloc_obj_t c = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_L2CACHE, nullptr); c != nullptr;
       c = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_L2CACHE, c)) {
    if (c->attr == nullptr || c->attr->cache.size == 0) continue;
    const size_t bytes = static_cast<size_t>(c->attr->cache.size);
    h.privateCacheBytes = h.privateCacheBytes == 0 ? bytes : std::min(h.privateCacheBytes, bytes);
  }
  h.numaNodes = numaNodesOf(t);
  if (h.numaNodes.empty()) {  // hwloc always reports one; an odd XML might not
    NumaNode n;
    for (int p = 0; p < h.pus; ++p) n.cpus.push_back(static_cast<unsigned>(p));
    h.numaNodes.push_back(std::move(n));
  }
  for (hwloc_obj_t pci = hwloc_get_next_pcidev(t, nullptr); pci != nullptr; pci = hwloc_get_next_pcidev(t, pci)) {
    if (isGpu(pci)) h.gpus.push_back(describePci(t, pci, h.numaNodes));
    else if (isNic(pci)) h.nics.push_back(describePci(t, pci, h.numaNodes));
  }
  std::sort(h.gpus.begin(), h.gpus.end(), [](const PciDevice& a, const PciDevice& b) { return a.busId < b.busId; });
  // The NICs that carry a job's traffic first, since channel c uses each host's NIC c: RDMA
  // ones, then faster PCIe links, then bus order. A 1 GbE management port, which most GPU
  // servers have, so sorts last, where fabricNicCount leaves it out.
  std::sort(h.nics.begin(), h.nics.end(), [](const PciDevice& a, const PciDevice& b) {
    return std::make_tuple(!a.rdma, -a.linkGBps, a.busId) < std::make_tuple(!b.rdma, -b.linkGBps, b.busId);
  });
  if (h.pus <= 0) return Status(weftSystemError, "topology " + h.source + " has no processing units");
  return h;
}

Result<HwlocTopology> openTopology(const std::string* xmlPath) {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) return Status(weftSystemError, "hwloc_topology_init failed: " + errnoString(errno));
  HwlocTopology t(raw);
  hwloc_topology_set_io_types_filter(t.get(), HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (xmlPath != nullptr && hwloc_topology_set_xml(t.get(), xmlPath->c_str()) != 0) {
    return Status(weftInvalidArgument, "cannot read topology file " + *xmlPath + ": " + errnoString(errno) +
                                           " (expected an hwloc XML file, e.g. from lstopo --of xml)");
  }
  if (hwloc_topology_load(t.get()) != 0) {
    return Status(xmlPath ? weftInvalidArgument : weftSystemError,
                  (xmlPath ? "cannot load topology file " + *xmlPath : std::string("cannot discover the topology")) +
                      ": " + errnoString(errno));
  }
  return t;
}

}  // namespace

int pciDistance(const PciDevice& a, const PciDevice& b) {
  if (a.busId == b.busId) return 0;
  size_t common = 0;
  while (common < a.path.size() && common < b.path.size() && a.path[common] == b.path[common]) ++common;
  const int hops = static_cast<int>(a.path.size() - common + b.path.size() - common);
  if (common > 0) return hops;
  const bool otherNode = a.numaNode >= 0 && b.numaNode >= 0 && a.numaNode != b.numaNode;
  return kCrossHostBridge + (otherNode ? kCrossHostBridge : 0) + hops;
}

int HostTopology::fabricNicCount() const {
  int count = 0;
  for (const PciDevice& nic : nics) {
    const PciDevice& first = nics.front();
    const bool slower = nic.linkGBps > 0 && first.linkGBps > 0 && nic.linkGBps * 4 < first.linkGBps;
    if (nic.rdma != first.rdma || slower) break;
    ++count;
  }
  return count;
}

int HostTopology::numaOfCpu(unsigned cpu) const {
  for (size_t n = 0; n < numaNodes.size(); ++n) {
    if (std::find(numaNodes[n].cpus.begin(), numaNodes[n].cpus.end(), cpu) != numaNodes[n].cpus.end()) {
      return static_cast<int>(n);
    }
  }
  return -1;
}

Result<HostTopology> loadTopologyXml(const std::string& path) {
  [[maybe_unused]] ThirdPartyAllocations untracked;
  WEFT_ASSIGN_OR_RETURN(HwlocTopology t, openTopology(&path));
  return fromHwloc(t.get(), path);
}

Result<HostTopology> discoverTopology() {
  [[maybe_unused]] ThirdPartyAllocations untracked;
  auto file = envString("WEFT_TOPO_FILE");
  WEFT_ASSIGN_OR_RETURN(HwlocTopology t, openTopology(file ? &*file : nullptr));
  if (auto dump = envString("WEFT_TOPO_DUMP_FILE")) {
    // A diagnostic: failing to write it warns, as NCCL_TOPO_DUMP_FILE does, and init goes on.
    if (hwloc_topology_export_xml(t.get(), dump->c_str(), 0) != 0) {
      WEFT_WARN("WEFT_TOPO_DUMP_FILE: cannot write %s (%s); not dumping the topology", dump->c_str(),
                errnoString(errno).c_str());
    } else {
      WEFT_INFO("topology written to %s", dump->c_str());
    }
  }
  return fromHwloc(t.get(), file ? *file : "live");
}

Result<std::shared_ptr<const HostTopology>> processTopology() {
  // Never destroyed: an init still running in another thread (a non-blocking one, say) may
  // reach them while the process exits and runs the destructors of statics.
  static auto* mutex = new std::mutex;
  static auto* cache = new std::map<std::string, std::shared_ptr<const HostTopology>>;
  const std::string key = envString("WEFT_TOPO_FILE").value_or("");
  std::lock_guard<std::mutex> lock(*mutex);
  auto it = cache->find(key);
  if (it != cache->end()) return it->second;
  WEFT_ASSIGN_OR_RETURN(HostTopology topology, discoverTopology());
  WEFT_INFO("%s", describeTopology(topology).c_str());
  auto shared = std::make_shared<const HostTopology>(std::move(topology));
  cache->emplace(key, shared);
  return shared;
}

std::string describeTopology(const HostTopology& h) {
  std::string out = formatString("%s: %d package(s), %zu NUMA node(s), %d core(s), %d PU(s), %zu KiB of last-level cache",
                                 h.source.c_str(), h.packages, h.numaNodes.size(), h.cores, h.pus, h.cacheBytes >> 10);
  out += h.privateCacheBytes > 0 ? formatString(", %zu KiB of L2 a core\n", h.privateCacheBytes >> 10) : "\n";
  for (size_t n = 0; n < h.numaNodes.size(); ++n) {
    const size_t pus = h.numaNodes[n].cpus.size();
    out += pus > 0 ? formatString("  NUMA %zu (os %u): %zu PU(s)\n", n, h.numaNodes[n].osIndex, pus)
                   : formatString("  NUMA %zu (os %u): memory only\n", n, h.numaNodes[n].osIndex);
  }
  auto devices = [&](const char* what, const std::vector<PciDevice>& list) {
    for (size_t i = 0; i < list.size(); ++i) {
      const PciDevice& d = list[i];
      const std::string netdev = d.netdev.empty() || d.netdev == d.name ? "" : " (" + d.netdev + ")";
      out += formatString("  %s %zu: %s%s %s [%04x:%04x] NUMA %d, %zu bridge(s) deep\n", what, i, d.name.c_str(),
                          netdev.c_str(), d.busId.c_str(), d.vendor, d.device, d.numaNode, d.path.size());
    }
  };
  devices("GPU", h.gpus);
  devices("NIC", h.nics);
  if (h.fabricNicCount() < static_cast<int>(h.nics.size())) {
    out += formatString("  NICs %d and on carry no traffic: slower than a quarter of NIC 0, or not its kind (%s)\n",
                        h.fabricNicCount(), h.nics.front().rdma ? "RDMA" : "no RDMA");
  }
  return out;
}

}  // namespace weft::topo
