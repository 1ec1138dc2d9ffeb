// --bind-to core: one core per rank, as mpirun's --bind-to core. A core is the set of hardware
// threads the kernel lists as one core's siblings; cores are taken in the order of their first
// CPU, from the CPUs the launcher itself may run on.
#include <sched.h>

#include <cstdio>
#include <fstream>
#include <map>

#include "job.h"

namespace weftrun {
namespace {

// The kernel's list of `cpu`'s core's hardware threads ("0-1", "0,4"); unique per core.
std::string core_key(int cpu) {
  for (const char* file : {"core_cpus_list", "thread_siblings_list"}) {
    char path[128];
    std::snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/topology/%s", cpu, file);
    std::ifstream in(path);
    std::string list;
    if (in >> list) return list;
  }
  return "cpu" + std::to_string(cpu);  // unknown: a core of its own
}

}  // namespace

std::optional<std::vector<cpu_set_t>> usable_cores(std::string& error) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) {
    error = "--bind-to core: cannot read the launcher's CPU affinity";
    return std::nullopt;
  }
  std::vector<cpu_set_t> cores;
  std::map<std::string, size_t> core_of;  // core key -> index into cores
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed)) continue;
    auto [it, added] = core_of.emplace(core_key(cpu), cores.size());
    if (added) {
      cores.emplace_back();
      CPU_ZERO(&cores.back());
    }
    CPU_SET(cpu, &cores[it->second]);
  }
  return cores;
}

std::optional<std::vector<cpu_set_t>> core_sets(int nproc, std::string& error) {
  auto cores = usable_cores(error);
  if (!cores) return std::nullopt;
  if (static_cast<int>(cores->size()) < nproc) {
    error = "--bind-to core needs a core per rank: " + std::to_string(nproc) + " ranks, " +
            std::to_string(cores->size()) + " core(s) this launcher may use (use --bind-to none to share them)";
    return std::nullopt;
  }
  cores->resize(static_cast<size_t>(nproc));
  return cores;
}

}  // namespace weftrun
