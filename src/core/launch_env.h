// Where a job's ranks learn who they are and where to meet, from the launcher's environment:
// torchrun (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE), Open MPI (OMPI_COMM_WORLD_*),
// Slurm (SLURM_PROCID, SLURM_NTASKS, ...), and WEFT_COMM_ID=host:port for the root.
#pragma once

#include <string>

#include "core/unique_id.h"

namespace weft::core {

struct LaunchInfo {
  int rank = -1;
  int nranks = 0;
  std::string launcher;      // "torchrun", "mpirun", "srun", "weft"
  UniqueIdContents id;       // root address and secret
  bool hostsRoot = false;    // rank 0 serves the bootstrap root itself
  std::string idFileToRemove;  // the local rendezvous file rank 0 deletes after init
};

// Reads the environment; rank 0 starts the root where the launcher says.
Result<LaunchInfo> launchFromEnvironment(int timeoutMs);

}  // namespace weft::core
