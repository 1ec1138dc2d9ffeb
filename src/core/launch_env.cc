#include "core/launch_env.h"

#include <sys/socket.h>
#include <unistd.h>

#include <charconv>
#include <cstring>

#include "core/bootstrap.h"
#include "core/local_rendezvous.h"
#include "transport/socket/socket_util.h"
#include "util/env.h"
#include "util/log.h"

namespace weft::core {
namespace {

struct LauncherVars {
  const char* launcher;
  const char* rank;
  const char* size;
  const char* localSize;  // ranks on this host, or nullptr: see spansHosts
  const char* hostCount;  // hosts in the job, or nullptr
  std::string jobKey;     // unique per launch, for the one-host rendezvous and the fallback secret
  bool jobNamed;           // a variable that makes jobKey unique is set
};

// `prefix` and the values of the launcher's job variables, joined by `separator`; *named says
// whether any of the first `naming` is set (the others only tell steps of a job apart).
std::string jobKeyOf(const char* prefix, std::initializer_list<const char*> names, size_t naming,
                     const char* separator, bool* named) {
  std::string key = prefix;
  size_t index = 0;
  for (const char* name : names) {
    const std::string value = envString(name).value_or("");
    key += (index == 0 ? "" : separator) + value;
    *named = *named || (index < naming && !value.empty());
    ++index;
  }
  return key;
}

Result<int> requiredInt(const char* name, int min, int max) {
  WEFT_ASSIGN_OR_RETURN(auto value, envInt(name, min, max));
  if (!value) return Status(weftInvalidUsage, std::string(name) + " is not set");
  return static_cast<int>(*value);
}

Result<LauncherVars> detectLauncher() {
  bool named = false;
  // weftrun's ranks may inherit an outer launcher's variables (weftrun started under mpirun or
  // srun): the ones weftrun set are theirs.
  const bool underWeftrun = envString("WEFT_LAUNCHER") == "weftrun" && envString("RANK") && envString("WORLD_SIZE");
  if (envString("OMPI_COMM_WORLD_RANK") && !underWeftrun) {
    // ORTE's job id (Open MPI 4), PRRTE's namespace (Open MPI 5)
    std::string key =
        jobKeyOf("ompi-", {"OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_hnp_uri", "PMIX_NAMESPACE"}, 3, "-", &named);
    return LauncherVars{"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", nullptr,
                        key, named};
  }
  if (envString("RANK") && envString("WORLD_SIZE")) {
    std::string key = jobKeyOf("torch-", {"TORCHELASTIC_RUN_ID", "MASTER_PORT"}, 2, "-", &named);
    return LauncherVars{envString("WEFT_LAUNCHER") ? "weftrun" : "torchrun", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                        nullptr, key, named};
  }
  if (envString("SLURM_PROCID")) {
    std::string key = jobKeyOf("slurm-", {"SLURM_JOB_ID", "SLURM_STEP_ID"}, 1, ".", &named);
    // Slurm gives no plain count of the tasks on this node (SLURM_STEP_NUM_TASKS is the step's
    // total), but the step's nodes.
    return LauncherVars{"srun", "SLURM_PROCID", "SLURM_NTASKS", nullptr, "SLURM_STEP_NUM_NODES", key, named};
  }
  return Status(weftInvalidUsage,
                "no launcher environment found: set RANK and WORLD_SIZE (torchrun style, with MASTER_ADDR/MASTER_PORT "
                "or WEFT_COMM_ID), or start under weftrun, mpirun or srun");
}

// Whether the job's ranks span several hosts, where the launcher says (nullopt where it does not).
Result<std::optional<bool>> spansHosts(const LauncherVars& vars, int nranks) {
  if (vars.hostCount != nullptr) {
    WEFT_ASSIGN_OR_RETURN(auto hosts, envInt(vars.hostCount, 1, 1 << 20));
    if (hosts) return std::optional<bool>(*hosts > 1);
  }
  if (vars.localSize != nullptr) {
    WEFT_ASSIGN_OR_RETURN(auto local, envInt(vars.localSize, 1, 1 << 20));
    if (local) return std::optional<bool>(*local < nranks);
  }
  return std::optional<bool>();
}

Result<Secret> secretFromEnvironment(const std::string& jobKey) {
  Secret secret{};
  if (auto hex = envString("WEFT_SECRET")) {
    // from_chars into an unsigned type takes hex digits only (no sign, no blanks, no 0x).
    bool hexOnly = hex->size() == 2 * secret.size();
    for (size_t i = 0; hexOnly && i < secret.size(); ++i) {
      const char* at = hex->data() + 2 * i;
      const auto [end, error] = std::from_chars(at, at + 2, secret[i], 16);
      hexOnly = error == std::errc() && end == at + 2;
    }
    if (!hexOnly) return Status(weftInvalidArgument, "WEFT_SECRET must be 64 hex digits");
    return secret;
  }
  // Without a shared secret from the launcher, derive one from the job: it keeps other jobs'
  // ranks out, though not someone who knows the job id (squeue shows Slurm's; torchrun's is
  // often "none"), so say so where everyone sees it.
  WEFT_WARN("WEFT_SECRET is not set: the bootstrap secret is derived from the launcher's job id, which others who "
            "can reach this job's ports may know; export the same WEFT_SECRET (64 hex digits, e.g. `openssl rand "
            "-hex 32`) to every rank to keep them out");
  for (size_t i = 0; i < secret.size(); i += 8) {
    uint64_t h = fnv1a64(jobKey.data(), jobKey.size(), 0xcbf29ce484222325ull + i);
    std::memcpy(secret.data() + i, &h, 8);
  }
  return secret;
}

}  // namespace

Result<LaunchInfo> launchFromEnvironment(int timeoutMs) {
  WEFT_ASSIGN_OR_RETURN(LauncherVars vars, detectLauncher());
  LaunchInfo info;
  info.launcher = vars.launcher;
  WEFT_ASSIGN_OR_RETURN(info.nranks, requiredInt(vars.size, 1, 1 << 20));
  WEFT_ASSIGN_OR_RETURN(info.rank, requiredInt(vars.rank, 0, info.nranks - 1));

  WEFT_ASSIGN_OR_RETURN(const std::optional<bool> spans, spansHosts(vars, info.nranks));
  std::optional<std::string> rootText = envString("WEFT_COMM_ID");
  if (!rootText && envString("MASTER_ADDR") && envString("MASTER_PORT")) {
    std::string host = *envString("MASTER_ADDR");
    if (host.find(':') != std::string::npos && host.front() != '[') host = "[" + host + "]";  // IPv6, as torchrun takes it
    rootText = host + ":" + *envString("MASTER_PORT");
  }
  if (rootText) {
    auto root = transport::SocketAddress::parse(*rootText);
    if (!root.isOk()) return root.status().withContext("the root address from the launcher");
    if (root.value().port() == 0) {  // rank 0 would bind some free port that no other rank knows
      return Status(weftInvalidArgument, "the root address from the launcher, \"" + *rootText +
                                             "\", has port 0: every rank must know the port beforehand, so give one "
                                             "from 1 to 65535 (WEFT_COMM_ID=host:port, or MASTER_PORT)");
    }
    info.id.root = root.value();
    info.id.spansHosts = spans.value_or(false);
    WEFT_ASSIGN_OR_RETURN(info.id.secret, secretFromEnvironment(vars.jobKey));
    info.hostsRoot = info.rank == 0;
    if (info.hostsRoot) {
      transport::SocketAddress listenAt = info.id.root;
      if (listenAt.isLoopback() && info.id.spansHosts) {
        // The root's name means this host's loopback here (Debian's /etc/hosts maps a host's own
        // name to 127.0.1.1) but the ranks on other hosts reach it by another address: listen on
        // every address, as torch's TCPStore does. The secret keeps strangers out.
        WEFT_ASSIGN_OR_RETURN(listenAt, transport::SocketAddress::parse(
                                            listenAt.family() == AF_INET6 ? "[::]" : "0.0.0.0", info.id.root.port()));
        WEFT_INFO("the root address %s is a loopback address on rank 0's host, but the job spans hosts: the "
                  "bootstrap root listens on every address (%s)",
                  info.id.root.toString().c_str(), listenAt.toString().c_str());
      }
      transport::SocketAddress bound;
      Status started = startBootstrapRoot(listenAt, info.id.secret, timeoutMs, &bound);
      if (!started.isOk()) {
        return started.withContext("rank 0 cannot host the bootstrap root at " + *rootText +
                                   " (is the port in use, e.g. by torchrun's store? set WEFT_COMM_ID=host:port)");
      }
    }
    return info;
  }

  // No address: all ranks must be on this host; meet through a private file keyed by the job.
  if (spans.value_or(false)) {
    return Status(weftInvalidUsage, formatString("%d ranks span several hosts but no root address is given: set "
                                                 "WEFT_COMM_ID=host:port (or MASTER_ADDR and MASTER_PORT)",
                                                 info.nranks));
  }
  const bool alone = info.nranks == 1;  // no other rank needs to find the root
  if (!alone && !vars.jobNamed) {  // every such job would meet at one file, and join each other's ranks
    return Status(weftInvalidUsage,
                  std::string("nothing in the environment names this job (") + vars.launcher +
                      "), so its ranks cannot be told from another job's on this host: set MASTER_ADDR and "
                      "MASTER_PORT or WEFT_COMM_ID=host:port (weftrun sets them), or run under a launcher that "
                      "names its jobs (TORCHELASTIC_RUN_ID, SLURM_JOB_ID, Open MPI's job id)");
  }
  const std::string path = alone ? std::string() : localRendezvousPath(vars.jobKey);
  if (info.rank == 0) {
    if (!alone) WEFT_TRY(checkNotHeldByAnotherJob(path));  // and again when publishing; here, before a root starts
    WEFT_ASSIGN_OR_RETURN(auto loopback, transport::SocketAddress::parse("127.0.0.1:0"));
    WEFT_ASSIGN_OR_RETURN(info.id.secret, newSecret());
    WEFT_TRY(startBootstrapRoot(loopback, info.id.secret, timeoutMs, &info.id.root, path));
    if (!alone) WEFT_TRY(publishLocalId(path, info.id));
    info.hostsRoot = true;
    info.idFileToRemove = path;
  } else {
    WEFT_ASSIGN_OR_RETURN(info.id, readLocalId(path, timeoutMs));
  }
  return info;
}

}  // namespace weft::core
