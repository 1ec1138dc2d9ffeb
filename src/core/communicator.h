// A communicator: this rank's place in a clique, its peer connections, and the collectives.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <tuple>

#include "coll/schedule_cache.h"
#include "core/collective_call.h"
#include "core/peer_mesh.h"
#include "core/unique_id.h"
#include "transport/shm/shared_host_memory.h"
#include "transport/shm/shm_arena.h"

namespace weft::core {

struct CommConfig {
  int timeoutMs = 300000;
  bool blocking = true;  // weftConfig_t.blocking: false, init and finalize return weftInProgress
  int spinMicros = -1;  // WEFT_SPIN_US; -1: chosen from the ranks and cores on this host
  int streamsPerPeer = 1;
  transport::ShmOptions shm;
  // The GPU current when the communicator was made (-1: none): its traffic leaves by the NIC
  // nearest to it, as NCCL binds a communicator to the device current at init.
  int device = -1;
};

// Reads WEFT_TIMEOUT_MS, WEFT_SOCKET_NSTREAMS and the shared-memory settings into the defaults.
Result<CommConfig> defaultCommConfig();

// How long a wait spins before it sleeps: the executor's, and the arena's.
struct SpinTimes {
  std::chrono::microseconds executor;
  std::chrono::microseconds arena;
};

class Communicator {
 public:
  // Collective over all ranks holding `id`; returns when every rank has joined.
  static Result<std::unique_ptr<Communicator>> create(const UniqueIdContents& id, int nranks, int rank,
                                                      const CommConfig& config, const std::atomic<bool>* abortFlag);

  int rank() const { return mesh_.rank(); }
  int size() const { return mesh_.size(); }
  int timeoutMs() const { return config_.timeoutMs; }
  // Names this communicator's shared-memory segments (a digest of its secret).
  uint32_t secretDigest() const { return mesh_.secretDigest(); }
  // A collective failed (a peer died, timed out, or called something else): it must be aborted.
  bool failed() const { return !failure_.isOk(); }
  // An operation the peers may have run did not run here: every later call fails instead.
  void failWith(Status status) { (void)fail(std::move(status)); }

  // Whether the plan moves device buffers GPU to GPU (CUDA/HIP IPC) between every pair: all
  // ranks on one host.
  bool deviceIpcEverywhere() const { return deviceIpcEverywhere_; }

  // The CPUs of this rank's NUMA node, where its progress thread belongs (empty: unknown).
  const std::vector<unsigned>& progressCpus() const { return progressCpus_; }

  // Runs one call, or a group's calls together (see coll/schedule_merge.h); returns when all
  // are done. Sends to and receives from this rank itself pair up within the calls.
  Status run(const CollectiveCall& call) { return runGroup({&call, 1}); }
  // A one-byte all-reduce: no rank returns before every rank has entered.
  Status barrier() {
    uint8_t token = 0;
    return run(CollectiveCall{coll::Collective::AllReduce, &token, &token, 1, weftUint8});
  }
  Status runGroup(std::span<const CollectiveCall> calls);

  // The tuner's price of the calls, one after another, in microseconds (weftGroupSimulateEnd):
  // each as the algorithm it would run with, by the model's current inputs. Any thread may ask
  // while collectives run.
  double predictedUs(std::span<const CollectiveCall> calls) const;

 private:
  Communicator(PeerMesh mesh, const CommConfig& config, coll::TuningConfig tuning, const std::atomic<bool>* abortFlag);
  void* scratch(size_t bytes);
  Status connectFor(std::span<const CollectiveCall> calls, const char* what, const Deadline& deadline);
  Status connectAll(const char* what, const Deadline& deadline);  // collective; once
  Status measureLinks();
  // The calls as schedules, run together by the executor.
  Status runScheduled(std::span<const CollectiveCall> calls, const Deadline& deadline);
  // On one host, small all-reduces, all-gathers and broadcasts skip the executor when the tuner
  // picks the one-shot algorithm for them: it runs over the arena (coll::runsOnArena).
  bool suitsArena(const CollectiveCall& call);
  // Collective, on the first call that suits the arena; if any rank cannot take part, arena_
  // stays empty and the tuner stops choosing it (so this does not run again).
  Status setUpArena(const Deadline& deadline);
  Status runOnArena(const CollectiveCall& call);
  // Large all-reduces on one host try the direct path (coll/direct_allreduce.h) through the
  // arena: it runs where every rank's buffers are from weftHostMemAlloc. Decided alike on every
  // rank, as suitsArena is; runDirect returns false, having written nothing, where it cannot run.
  bool suitsDirect(const CollectiveCall& call) const;
  Result<bool> runDirect(const CollectiveCall& call);
  coll::CollectiveShape shapeOf(const CollectiveCall& call) const;
  // The tuner's choice, kept per (collective, bytes, element size): it is fixed for the
  // communicator's life, and the model prices every algorithm to find it.
  coll::Algorithm algorithmFor(coll::Collective collective, size_t bytes, size_t elementSize);
  void forgetChoices();  // after the model's inputs change
  // A failed collective leaves connections mid-message: the communicator stays failed.
  Status fail(Status status);

  PeerMesh mesh_;
  CommConfig config_;
  coll::TuningConfig tuning_;
  bool timingLinks_ = false;  // measureLinks() is timing all-reduces it forced
  const std::atomic<bool>* abortFlag_;
  coll::ScheduleCache schedules_;
  bool allConnected_ = false;           // connectAll has run: the three flags below are known
  bool recvReduceEverywhere_ = false;  // every connection reduces on receipt
  bool shmEverywhere_ = false;         // every connection is shared memory
  bool forwardEverywhere_ = false;     // every connection's receives can pass on through any other's sends
  std::optional<transport::ShmArena> arena_;
  uint32_t arenaSeq_ = 0;  // arena calls so far
  transport::PeerAllocations peerAllocations_;  // the peers' weftHostMemAlloc buffers, as mapped here
  bool directReported_ = false;                // whether the direct path was logged yet
  size_t directStreamingMinBytes_ = SIZE_MAX;  // from here the direct path streams its output
  coll::RankOrder order_;               // the planner's first ring and its trees, which algorithms follow
  bool deviceIpcEverywhere_ = false;
  coll::LinkCost link_{};               // what the tuner's model prices algorithms with
  coll::CommLayout layout_{};           // its size, planned trees and crowding, for the model
  // Held where layout_ or link_ change once the communicator is in use (the arena's setup), and
  // by predictedUs, which another thread calls.
  mutable std::mutex modelMutex_;
  using ChoiceKey = std::tuple<coll::Collective, size_t, size_t>;  // algorithmFor's arguments
  std::map<ChoiceKey, coll::Algorithm> algorithms_;                     // its choices
  std::optional<std::pair<ChoiceKey, coll::Algorithm>> lastAlgorithm_;  // its last hit
  std::vector<unsigned> progressCpus_;
  SpinTimes spin_;
  struct FreeDeleter { void operator()(void* p) const { std::free(p); } };
  std::unique_ptr<char, FreeDeleter> scratch_;
  size_t scratchBytes_ = 0;
  Status failure_;
};

}  // namespace weft::core
