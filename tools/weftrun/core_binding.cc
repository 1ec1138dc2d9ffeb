// --bind-to core: one core per rank, as mpirun's --bind-to core. A core is every hardware
// thread the kernel gives the same (package, core) id; cores are taken in the order of their
// first CPU, from the CPUs the launcher itself may run on.
#include <sched.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <utility>

#include "job.h"

namespace weftrun {
namespace {

// The kernel's id of `cpu`'s package or core (-1 when sysfs does not say).
int topology_id(int cpu, const char* what) {
  char path[128];
  std::snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/topology/%s", cpu, what);
  std::ifstream in(path);
  int id = -1;
  return in >> id ? id : -1;
}

}  // namespace

std::optional<std::vector<cpu_set_t>> core_sets(int nproc, std::string& error) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) {
    error = "--bind-to core: cannot read the launcher's CPU affinity";
    return std::nullopt;
  }
  std::vector<cpu_set_t> cores;
  std::map<std::pair<int, int>, size_t> core_of;  // (package, core) -> index into cores
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed)) continue;
    const int core = topology_id(cpu, "core_id");
    const int package = topology_id(cpu, "physical_package_id");
    // A CPU whose ids are unknown is a core of its own.
    const std::pair<int, int> key = core < 0 ? std::pair{-1 - cpu, -1} : std::pair{package, core};
    auto [it, added] = core_of.emplace(key, cores.size());
    if (added) {
      cores.emplace_back();
      CPU_ZERO(&cores.back());
    }
    CPU_SET(cpu, &cores[it->second]);
  }
  if (static_cast<int>(cores.size()) < nproc) {
    error = "--bind-to core needs a core per rank: " + std::to_string(nproc) + " ranks, " +
            std::to_string(cores.size()) + " core(s) this launcher may use (use --bind-to none to share them)";
    return std::nullopt;
  }
  cores.resize(static_cast<size_t>(nproc));
  return cores;
}

}  // namespace weftrun
