// PCI bus ids as the GPU runtimes and hwloc write them: "domain:bus:device.function" in hex, with
// a domain of 4 digits (hwloc, cudaDeviceGetPCIBusId) or 8 (NVML), in either case.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "topo/topology.h"

namespace weft::topo {

struct PciAddress {
  uint32_t domain = 0;
  uint32_t bus = 0;
  uint32_t device = 0;
  uint32_t function = 0;
  bool operator==(const PciAddress&) const = default;
};

// The address a bus id names; nullopt for anything else.
std::optional<PciAddress> parsePciBusId(std::string_view busId);

// The index into host.gpus of the GPU at `busId`, or -1 (not a bus id, or no such GPU).
int gpuIndexByBusId(const HostTopology& host, std::string_view busId);

}  // namespace weft::topo
