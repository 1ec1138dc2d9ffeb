#include "core/communicator.h"

#include <sched.h>

#include <cstring>

#include "core/bootstrap.h"
#include "kernels/cpu/reduce.h"
#include "util/env.h"
#include "util/log.h"

namespace weft::core {

Result<CommConfig> defaultCommConfig() {
  CommConfig config;
  WEFT_ASSIGN_OR_RETURN(config.timeoutMs, defaultTimeoutMs());
  WEFT_ASSIGN_OR_RETURN(auto streams, envInt("WEFT_SOCKET_NSTREAMS", 1, 16));
  if (streams) config.streamsPerPeer = static_cast<int>(*streams);
  WEFT_ASSIGN_OR_RETURN(config.shm, transport::shmOptionsFromEnv());
  WEFT_ASSIGN_OR_RETURN(auto spin, envInt("WEFT_SPIN_US", 0, 10000000));
  if (spin) config.spinMicros = static_cast<int>(*spin);
  return config;
}

namespace {

// Spin long while every rank on this host has a core of its own, briefly when they share.
std::chrono::microseconds chooseSpinTime(const CommConfig& config, const PeerMesh& mesh) {
  if (config.spinMicros >= 0) return std::chrono::microseconds(config.spinMicros);
  int local = 0;
  for (int r = 0; r < mesh.size(); ++r) local += mesh.peer(r).hostHash == mesh.peer(mesh.rank()).hostHash;
  cpu_set_t cpus;
  int cores = ::sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
  auto spin = std::chrono::microseconds(local <= cores ? 2000 : 50);
  WEFT_INFO("%d rank(s) on this host, %d core(s) available: waits spin %lld us before sleeping", local, cores,
            static_cast<long long>(spin.count()));
  return spin;
}

}  // namespace

Communicator::Communicator(PeerMesh mesh, const CommConfig& config, coll::TuningConfig tuning,
                           const std::atomic<bool>* abortFlag)
    : mesh_(std::move(mesh)),
      config_(config),
      tuning_(tuning),
      abortFlag_(abortFlag),
      spinTime_(chooseSpinTime(config_, mesh_)) {}

Result<std::unique_ptr<Communicator>> Communicator::create(const UniqueIdContents& id, int nranks, int rank,
                                                           const CommConfig& config,
                                                           const std::atomic<bool>* abortFlag) {
  WEFT_ASSIGN_OR_RETURN(coll::TuningConfig tuning, coll::loadTuningConfig());
  WEFT_ASSIGN_OR_RETURN(Rendezvous rendezvous, joinRendezvous(id, rank, nranks, config.timeoutMs, abortFlag));
  PeerMesh mesh(rank, std::move(rendezvous), id.secret, config.streamsPerPeer, config.shm, abortFlag);
  return std::unique_ptr<Communicator>(new Communicator(std::move(mesh), config, tuning, abortFlag));
}

void* Communicator::scratch(size_t bytes) {
  if (bytes > scratchBytes_) {
    scratch_.reset(static_cast<char*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
    if (!scratch_) {
      scratchBytes_ = 0;
      return nullptr;
    }
    scratchBytes_ = bytes;
  }
  return scratch_.get();
}

Status Communicator::fail(Status status) {
  if (!status.isOk() && failure_.isOk()) failure_ = status;
  return status;
}

Status Communicator::allReduce(const void* sendbuff, void* recvbuff, size_t count, weftDataType_t type,
                               weftRedOp_t op) {
  if (!failure_.isOk()) {
    return Status(failure_.code(), "the communicator failed earlier and must be aborted: " + failure_.message());
  }
  if (abortFlag_->load()) return Status(weftInvalidUsage, "the communicator was aborted");
  const size_t elementSize = kernels::dataTypeSize(type);
  const size_t bytes = count * elementSize;
  const Deadline deadline = Deadline::afterMs(config_.timeoutMs);
  coll::AllReduceShape shape{size(), rank(), count, elementSize, sendbuff == recvbuff, op == weftAvg};
  if (size() > 1 && bytes > 0) {
    WEFT_TRY(fail(mesh_.connectAll(deadline).withContext("all-reduce")));
    WEFT_ASSIGN_OR_RETURN(transport::Connection * fromPrev, mesh_.connection((rank() + size() - 1) % size(), deadline));
    shape.recvReduce = fromPrev->supportsRecvReduce();
  }
  const coll::AllReduceAlgorithm algorithm = coll::chooseAllReduce(tuning_, bytes, size());
  const coll::Schedule& schedule = schedules_.allReduce(shape, algorithm, tuning_);
  void* scratchBuffer = scratch(schedule.scratchBytes);
  if (schedule.scratchBytes > 0 && scratchBuffer == nullptr) {
    return Status(weftSystemError, formatString("all-reduce: out of memory for %zu bytes of scratch", schedule.scratchBytes));
  }
  coll::ExecutionBuffers buffers{sendbuff, recvbuff, scratchBuffer};
  coll::ExecutionContext context{type,      op,         size(), "all-reduce", deadline, config_.timeoutMs,
                                 abortFlag_, &mesh_,     spinTime_};
  return fail(coll::executeSchedule(schedule, buffers, context));
}

}  // namespace weft::core
