// Rank placements for planner and tuner tests, without a live machine.
#pragma once

#include <vector>

#include "plan/planner.h"

namespace weft::test {

// `hosts` hosts of `perHost` ranks each, numbered across the hosts (rank r on host r mod
// hosts), so that plan order is not rank order; `cpus` CPUs per host. With `nics` NICs per
// host (two or more make that many channels), local rank l is nearest NIC l.
inline std::vector<plan::RankPlacement> interleaved(int hosts, int perHost, int cpus, int nics = 0) {
  std::vector<plan::RankPlacement> ranks(static_cast<size_t>(hosts * perHost));
  for (size_t r = 0; r < ranks.size(); ++r) {
    ranks[r].host = static_cast<int>(r) % hosts;
    ranks[r].cpus = cpus;
    ranks[r].nicCount = nics;
    ranks[r].preferredNic = nics > 0 ? static_cast<int>(r) / hosts % nics : -1;
  }
  return ranks;
}

}  // namespace weft::test
