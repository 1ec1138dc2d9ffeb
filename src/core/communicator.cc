#include "core/communicator.h"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>

#include "core/bootstrap.h"
#include "core/self_exchange.h"
#include "gpu/device_memory.h"
#include "coll/arena_allreduce.h"
#include "coll/direct_allreduce.h"
#include "coll/schedule_merge.h"
#include "plan/planner.h"
#include "topo/pci_bus_id.h"
#include "topo/topology.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/reduce.h"
#include "transport/shm/shm_segment.h"
#include "util/env.h"
#include "util/log.h"

namespace weft::core {

namespace {

// WEFT_CPU_ISA is read by the kernels on first use, which cannot fail; a name they do not
// know is an error here instead, and one this CPU cannot run a warning (one environment may
// serve hosts of different CPUs).
Status checkCpuIsaChoice() {
  const auto requested = envString("WEFT_CPU_ISA");
  if (!requested) return Status::ok();
  std::string names;
  bool known = false;
  for (const char* name : kernels::kCpuIsas) {
    known = known || *requested == name;
    names += (names.empty() ? "" : ", ") + std::string(name);
  }
  if (!known) return Status(weftInvalidArgument, "WEFT_CPU_ISA=\"" + *requested + "\": expected " + names);
  if (!kernels::isaSupported(requested->c_str())) {
    WEFT_WARN("WEFT_CPU_ISA=%s: this CPU cannot run it; the reduction kernels use %s", requested->c_str(),
              kernels::activeIsa());
  }
  return Status::ok();
}

}  // namespace

Result<CommConfig> defaultCommConfig() {
  CommConfig config;
  WEFT_ASSIGN_OR_RETURN(config.timeoutMs, defaultTimeoutMs());
  WEFT_ASSIGN_OR_RETURN(auto streams, envInt("WEFT_SOCKET_NSTREAMS", 1, 16));
  if (streams) config.streamsPerPeer = static_cast<int>(*streams);
  WEFT_ASSIGN_OR_RETURN(config.shm, transport::shmOptionsFromEnv());
  WEFT_ASSIGN_OR_RETURN(auto spin, envInt("WEFT_SPIN_US", 0, 10000000));
  if (spin) config.spinMicros = static_cast<int>(*spin);
  WEFT_TRY(checkCpuIsaChoice());
  return config;
}

namespace {

// How long waits spin (yielding the core) before they sleep: long while every rank on this host
// has a core of its own. Where ranks share cores, a step of the executor waits on transfers that
// outlast a short spin, and a sleeper takes about 260 us to wake on a small VM, so it spins
// 300 us (4 and 8 ranks on 2 cores: 1.2-2.8x the busbw of a 50 us spin at 128 KiB-2 MiB); the
// arena's waits are for peers that need this core to publish at all, so they sleep after 50 us
// (a 300 us spin doubled its 8-byte time).
SpinTimes chooseSpinTimes(const CommConfig& config, const PeerMesh& mesh) {
  if (config.spinMicros >= 0) return {std::chrono::microseconds(config.spinMicros), std::chrono::microseconds(config.spinMicros)};
  int local = 0;
  for (int r = 0; r < mesh.size(); ++r) local += mesh.peer(r).hostHash == mesh.peer(mesh.rank()).hostHash;
  cpu_set_t cpus;
  int cores = ::sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
  const SpinTimes spin = local <= cores ? SpinTimes{std::chrono::microseconds(2000), std::chrono::microseconds(2000)}
                                        : SpinTimes{std::chrono::microseconds(300), std::chrono::microseconds(50)};
  WEFT_INFO("%d rank(s) on this host, %d core(s) available: waits spin %lld us (the arena's %lld us) before sleeping",
            local, cores, static_cast<long long>(spin.executor.count()), static_cast<long long>(spin.arena.count()));
  return spin;
}

}  // namespace

Communicator::Communicator(PeerMesh mesh, const CommConfig& config, coll::TuningConfig tuning,
                           const std::atomic<bool>* abortFlag)
    : mesh_(std::move(mesh)),
      config_(config),
      tuning_(tuning),
      abortFlag_(abortFlag),
      spin_(chooseSpinTimes(config_, mesh_)) {}

namespace {

// The rank's index among the ranks of its host, from the launcher, for spreading host-memory
// ranks over NICs; the global rank when no launcher says.
int localRankHint(int rank) {
  for (const char* name : {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}) {
    if (auto value = envString(name)) {
      char* end = nullptr;
      long v = std::strtol(value->c_str(), &end, 10);
      if (end != value->c_str() && *end == '\0' && v >= 0 && v < (1 << 20)) return static_cast<int>(v);
    }
  }
  return rank;
}

// Every rank's placement with host indexes in order of first appearance.
std::vector<plan::RankPlacement> placementsOf(const std::vector<PeerInfo>& peers) {
  std::vector<uint64_t> hosts;
  std::vector<plan::RankPlacement> out;
  for (const PeerInfo& p : peers) {
    auto it = std::find(hosts.begin(), hosts.end(), p.hostHash);
    if (it == hosts.end()) it = hosts.insert(hosts.end(), p.hostHash);
    plan::RankPlacement placement = p.placement;
    placement.host = static_cast<int>(it - hosts.begin());
    out.push_back(placement);
  }
  return out;
}

// A rank with WEFT_TRANSPORT=shm cannot talk to a rank on another host, or to one on its own
// host with shared memory disabled. Every rank finds the same first such pair, so all of them
// fail init alike, instead of the pair failing apart at its first call.
Status checkSharedMemoryOnly(const std::vector<PeerInfo>& peers, const std::vector<plan::RankPlacement>& placements) {
  for (size_t a = 0; a < placements.size(); ++a) {
    if (!placements[a].sharedMemoryOnly) continue;
    for (size_t b = 0; b < placements.size(); ++b) {
      if (b == a) continue;
      const char* why = placements[b].host != placements[a].host ? "is on another host"
                        : !placements[b].sharedMemory ? "has shared memory disabled (WEFT_TRANSPORT=socket or WEFT_SHM_DISABLE=1)"
                                                      : nullptr;
      if (why == nullptr) continue;
      return Status(weftInvalidUsage, formatString("rank %zu (%s) has WEFT_TRANSPORT=shm, but rank %zu (%s) %s", a,
                                                   peers[a].hostName.c_str(), b, peers[b].hostName.c_str(), why));
    }
  }
  return Status::ok();
}

// The index into host.gpus of the runtime's device `device`, matched by PCI bus id; -1 for none
// (or a device the topology does not show, with a line at WEFT_DEBUG=INFO).
int gpuOnHost(const topo::HostTopology& host, int device) {
  if (device < 0) return -1;
  const std::string busId = gpu::pciBusId(device);
  const int index = topo::gpuIndexByBusId(host, busId);
  if (index < 0) {
    WEFT_INFO("GPU %d (PCI %s) is not in the topology (%s): placed by NUMA node only", device,
              busId.empty() ? "unknown" : busId.c_str(), host.source.c_str());
  }
  return index;
}

}  // namespace

Result<std::unique_ptr<Communicator>> Communicator::create(const UniqueIdContents& id, int nranks, int rank,
                                                           const CommConfig& config,
                                                           const std::atomic<bool>* abortFlag) {
  WEFT_ASSIGN_OR_RETURN(coll::TuningConfig tuning, coll::loadTuningConfig());
  const uint16_t settings = coll::settingsDigest(tuning, config.streamsPerPeer);
  WEFT_ASSIGN_OR_RETURN(auto host, topo::processTopology());
  const int numa = plan::currentNumaNode(*host);
  plan::RankPlacement mine = plan::placeRank(*host, numa, gpuOnHost(*host, config.device), localRankHint(rank));
  mine.sharedMemory = config.shm.policy != transport::ShmPolicy::Never;
  mine.sharedMemoryOnly = config.shm.policy == transport::ShmPolicy::Required;
  WEFT_ASSIGN_OR_RETURN(Rendezvous rendezvous,
                        joinRendezvous(id, rank, nranks, config.timeoutMs, mine, *host, settings, abortFlag));
  for (int r = 0; r < nranks; ++r) {
    const PeerInfo& peer = rendezvous.peers[static_cast<size_t>(r)];
    if (peer.settingsDigest != settings) {
      return Status(weftInvalidUsage,
                    formatString("rank %d (%s) runs with different tuning settings than rank %d: set WEFT_ALGO, "
                                 "WEFT_TUNE, WEFT_CHUNK_BYTES, WEFT_RD/ONESHOT/TREE_MAX_BYTES and "
                                 "WEFT_SOCKET_NSTREAMS alike on every rank",
                                 r, peer.hostName.c_str(), rank));
    }
  }
  const std::vector<plan::RankPlacement> placements = placementsOf(rendezvous.peers);
  WEFT_TRY(checkSharedMemoryOnly(rendezvous.peers, placements));
  plan::Plan plan = plan::makePlan(placements);
  if (rank == 0) WEFT_INFO("plan: %s", plan::describePlan(plan, placements).c_str());
  std::vector<std::vector<std::pair<int, int>>> channelNics;
  std::vector<plan::Transport> transports;
  bool deviceIpcEverywhere = true;
  for (int peer = 0; peer < nranks; ++peer) {
    channelNics.push_back(plan::channelNics(plan, placements, rank, peer));
    transports.push_back(plan::transportBetween(plan, placements, rank, peer));
    deviceIpcEverywhere = deviceIpcEverywhere &&
                          plan::deviceTransportBetween(placements, rank, peer) != plan::DeviceTransport::Staged;
  }
  PeerMesh mesh(rank, std::move(rendezvous), id.secret, config.streamsPerPeer, config.shm, std::move(transports),
                std::move(channelNics), abortFlag);
  auto communicator = std::unique_ptr<Communicator>(new Communicator(std::move(mesh), config, tuning, abortFlag));
  communicator->order_ = plan::rankOrderOf(plan);
  // Whether the arena may serve small all-reduces must be the same on every rank, so it is
  // decided from what all ranks know (one host, shared memory allowed everywhere); a rank that
  // cannot take part (no shared memory to be had) says so when the arena is set up, and all
  // fall back together.
  const bool arena = nranks > 1 && plan.hosts == 1 &&
                     std::all_of(placements.begin(), placements.end(), [](const plan::RankPlacement& p) { return p.sharedMemory; });
  communicator->layout_ = plan::commLayoutOf(communicator->order_, placements);
  communicator->layout_.arenaBytes = arena ? coll::kArenaMaxBytes : 0;
  if (tuning.pipeline.streamingMinBytes == SIZE_MAX && communicator->layout_.cacheBytesPerRank > 0) {
    communicator->tuning_.pipeline.streamingMinBytes = communicator->layout_.cacheBytesPerRank / 2;
  }
  communicator->directStreamingMinBytes_ =
      coll::directStreamingMinBytes(communicator->tuning_.pipeline.streamingMinBytes,
                                    tuning.pipeline.streamingMinBytes != SIZE_MAX, host->privateCacheBytes,
                                    communicator->layout_.ranksPerCpu);
  communicator->deviceIpcEverywhere_ = deviceIpcEverywhere;
  // The model prices every algorithm by the slowest link any pair uses (as planned: the same on
  // every rank, so that all ranks choose alike).
  const bool anySocket = plan::anySocketPair(plan, placements);
  communicator->link_ = anySocket ? coll::defaultSocketCost() : coll::defaultSharedMemoryCost();
  coll::chooseChunkBytes(&communicator->tuning_, anySocket);
  if (tuning.measureLinks) WEFT_TRY(communicator->measureLinks());
  if (numa >= 0) communicator->progressCpus_ = host->numaNodes[static_cast<size_t>(numa)].cpus;
  return communicator;
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
  if (!status.isOk() && failure_.isOk()) {
    failure_ = status;
    // A peer that died between creating a segment and this rank mapping it left the name, and
    // may never have told it to anyone: remove every segment whose creator is gone.
    transport::ShmSegment::removeOrphans();
  }
  return status;
}

Status Communicator::connectFor(std::span<const CollectiveCall> calls, const char* what, const Deadline& deadline) {
  bool everyone = false;
  std::vector<int> peers;
  for (const CollectiveCall& call : calls) {
    if (callBytes(call) == 0) continue;
    if (!isPointToPoint(call)) {
      everyone = everyone || size() > 1;
    } else if (call.root != rank() && std::find(peers.begin(), peers.end(), call.root) == peers.end()) {
      peers.push_back(call.root);
    }
  }
  if (everyone) return connectAll(what, deadline);
  if (peers.empty()) return Status::ok();
  return fail(mesh_.connectPeers(std::move(peers), deadline).withContext(what));
}

Status Communicator::connectAll(const char* what, const Deadline& deadline) {
  if (allConnected_) return Status::ok();
  WEFT_TRY(fail(mesh_.connectAll(deadline).withContext(what)));
  allConnected_ = true;
  recvReduceEverywhere_ = true;
  shmEverywhere_ = true;
  std::vector<transport::Connection*> connections;
  for (int peer = 0; peer < size(); ++peer) {
    if (peer == rank()) continue;
    WEFT_ASSIGN_OR_RETURN(transport::Connection * c, mesh_.connection(peer, deadline));
    recvReduceEverywhere_ = recvReduceEverywhere_ && c->supportsRecvReduce();
    shmEverywhere_ = shmEverywhere_ && std::strcmp(c->kind(), "shm") == 0;
    connections.push_back(c);
  }
  // Forwarding changes nothing on the wire, so ranks need not agree on it (WEFT_SHM_FORWARD).
  forwardEverywhere_ = recvReduceEverywhere_;
  for (transport::Connection* from : connections) {
    for (transport::Connection* to : connections) forwardEverywhere_ = forwardEverywhere_ && from->canForwardTo(*to);
  }
  return Status::ok();
}

coll::Algorithm Communicator::algorithmFor(coll::Collective collective, size_t bytes, size_t elementSize) {
  const ChoiceKey key{collective, bytes, elementSize};
  if (lastAlgorithm_ && lastAlgorithm_->first == key) return lastAlgorithm_->second;  // a loop's repeats
  if (auto it = algorithms_.find(key); it != algorithms_.end()) {
    lastAlgorithm_ = *it;
    return it->second;
  }
  if (algorithms_.size() >= 256) algorithms_.clear();  // a size sweep must not grow it forever
  lastAlgorithm_.reset();
  const coll::Algorithm algorithm = coll::chooseAlgorithm(tuning_, link_, layout_, collective, bytes, elementSize);
  algorithms_.emplace(key, algorithm);
  // The model's prices (every rank prices alike), also where WEFT_ALGO forces the algorithm:
  // bench/tuner_accuracy.py compares each run's times with the prices of its own communicators.
  // Not while WEFT_TUNE=measure times the links, whose prices are not fitted yet.
  if (rank() == 0 && !timingLinks_ && logLevel() >= LogLevel::Info) {
    const std::string prices = coll::describePredictions(tuning_, link_, layout_, collective, bytes, elementSize);
    WEFT_INFO("%s of %zu bytes in %zu-byte elements on %d ranks, predicted: %s", coll::collectiveName(collective),
              bytes, elementSize, size(), prices.c_str());
  }
  if (coll::runsOnArena(layout_, collective, algorithm, bytes)) {
    // No schedule is built for these (schedule_cache.cc logs the others' choices).
    WEFT_INFO("%s of %zu bytes on %d ranks: one-shot through the shared-memory arena", coll::collectiveName(collective),
              bytes, size());
  }
  return algorithm;
}

coll::CollectiveShape Communicator::shapeOf(const CollectiveCall& call) const {
  using coll::Collective;
  coll::CollectiveShape shape;
  shape.collective = call.collective;
  shape.nranks = size();
  shape.rank = rank();
  shape.count = call.count;
  shape.elementSize = kernels::dataTypeSize(call.type);
  shape.root = call.root;
  shape.average = call.op == weftAvg;
  shape.recvReduce = recvReduceEverywhere_;
  shape.forward = forwardEverywhere_;
  shape.order = &order_;
  const char* send = static_cast<const char*>(call.send);
  const char* recv = static_cast<const char*>(call.recv);
  const size_t myBlock = static_cast<size_t>(rank()) * shape.bytes();
  const bool isRoot = rank() == call.root;
  switch (call.collective) {
    case Collective::AllReduce:
    case Collective::AlltoAll: shape.inPlace = send == recv; break;
    case Collective::Broadcast:
    case Collective::Reduce: shape.inPlace = isRoot && send == recv; break;
    case Collective::AllGather: shape.inPlace = recv != nullptr && send == recv + myBlock; break;
    case Collective::ReduceScatter: shape.inPlace = send != nullptr && recv == send + myBlock; break;
    case Collective::Gather: shape.inPlace = isRoot && recv != nullptr && send == recv + myBlock; break;
    case Collective::Scatter: shape.inPlace = isRoot && send != nullptr && recv == send + myBlock; break;
    case Collective::Send:
    case Collective::Recv: break;
  }
  return shape;
}

double Communicator::predictedUs(std::span<const CollectiveCall> calls) const {
  std::lock_guard lock(modelMutex_);
  double us = 0;
  for (const CollectiveCall& call : calls) {
    if (isPointToPoint(call) && call.root == rank()) continue;  // a copy within the group, not a message
    const size_t bytes = callBytes(call), elementSize = kernels::dataTypeSize(call.type);
    const coll::Algorithm algorithm =
        coll::chooseAlgorithm(tuning_, link_, layout_, call.collective, bytes, elementSize);
    us += coll::predictUs(link_, layout_, call.collective, algorithm, bytes, elementSize, tuning_.pipeline.chunkBytes);
  }
  return us;
}

void Communicator::forgetChoices() {
  algorithms_.clear();
  lastAlgorithm_.reset();
}

Status Communicator::runGroup(std::span<const CollectiveCall> calls) {
  if (!failure_.isOk()) {
    return Status(failure_.code(), "the communicator failed earlier and must be aborted: " + failure_.message());
  }
  if (abortFlag_->load()) return Status(weftInvalidUsage, "the communicator was aborted");
  // Which collectives the arena serves is decided per call, never per group: ranks may group
  // different point-to-point calls with the same collectives (as NCCL allows), and must still
  // meet in the arena. Those collectives run first, in the order issued, and the rest as one
  // schedule; a collective never waits on a point-to-point call that way round.
  //
  // Any error from here on may leave the peers inside this call (a rank-local one too: a
  // self send without its receive, memory for staging), so it fails the communicator: a later
  // call would otherwise meet what the peers posted for this one, tags alike, and succeed on
  // the wrong data.
  size_t onArena = 0;
  for (const CollectiveCall& call : calls) onArena += suitsDirect(call) || suitsArena(call) ? 1 : 0;
  if (onArena > 0 && !arena_) WEFT_TRY(fail(setUpArena(Deadline::afterMs(config_.timeoutMs))));
  if (onArena == 0 || !arena_) return fail(runScheduled(calls, Deadline::afterMs(config_.timeoutMs)));
  if (calls.size() == 1 && !suitsDirect(calls[0])) return fail(runOnArena(calls[0]));  // the latency path: no copies
  std::vector<CollectiveCall> rest;
  for (const CollectiveCall& call : calls) {
    if (suitsDirect(call)) {
      Result<bool> done = runDirect(call);
      if (!done.isOk()) return fail(done.status());
      if (!done.value()) rest.push_back(call);  // some rank's buffers are not shared: alike everywhere
    } else if (suitsArena(call)) {
      WEFT_TRY(fail(runOnArena(call)));
    } else {
      rest.push_back(call);
    }
  }
  return rest.empty() ? Status::ok() : fail(runScheduled(rest, Deadline::afterMs(config_.timeoutMs)));
}

Status Communicator::runScheduled(std::span<const CollectiveCall> calls, const Deadline& deadline) {
  const char* what = calls.size() == 1 ? coll::collectiveName(calls[0].collective) : "group";
  // The merged schedule keeps each peer's messages in operation order, and ranks issue their
  // collectives in one order but may interleave point-to-point calls differently (NCCL keeps
  // the two on separate connections). So the collectives go first, then the point-to-point
  // calls, each in issue order: the n-th send to a peer still meets its n-th receive.
  std::vector<CollectiveCall> reordered;
  if (calls.size() > 1 && !std::is_partitioned(calls.begin(), calls.end(), std::not_fn(isPointToPoint))) {
    reordered.assign(calls.begin(), calls.end());
    std::stable_partition(reordered.begin(), reordered.end(), std::not_fn(isPointToPoint));
    calls = reordered;
  }
  WEFT_TRY(copyToSelf(calls, rank()));
  WEFT_TRY(connectFor(calls, what, deadline));

  std::vector<std::shared_ptr<const coll::Schedule>> schedules;
  std::vector<coll::OperationData> operations;
  std::vector<std::unique_ptr<char, FreeDeleter>> staging;  // PreMulSum's scaled inputs, Avg's divided ones
  for (const CollectiveCall& original : calls) {
    if (isPointToPoint(original) && original.root == rank()) continue;  // copied above
    CollectiveCall call = original;  // tagged as issued, before the rewrites below
    if (call.preMulSum || dividesInputs(call)) {
      const size_t bytes = inputBytes(call, size());
      staging.emplace_back(static_cast<char*>(std::malloc(std::max<size_t>(bytes, 1))));
      if (!staging.back()) return Status(weftSystemError, formatString("%s: out of memory for %zu bytes", what, bytes));
      const size_t elements = bytes / kernels::dataTypeSize(call.type);
      if (call.preMulSum) {
        kernels::scale(staging.back().get(), call.send, elements, call.type,
                       call.scalarAt ? call.scalarAt : call.scalarValue.data());
      } else {
        kernels::divide(staging.back().get(), call.send, elements, call.type, static_cast<uint64_t>(size()));
      }
      call.send = staging.back().get();
      call.op = weftSum;
    }
    const coll::CollectiveShape shape = shapeOf(call);
    const coll::Algorithm algorithm = algorithmFor(call.collective, shape.bytes(), shape.elementSize);
    schedules.push_back(schedules_.get(shape, algorithm, tuning_.pipeline));
    operations.push_back({call.send, call.recv, call.type, call.op, messageTag(original)});
  }
  if (schedules.empty()) return Status::ok();
  coll::Schedule merged;
  const coll::Schedule* schedule = schedules[0].get();
  if (schedules.size() > 1) {
    std::vector<const coll::Schedule*> parts;
    for (const auto& s : schedules) parts.push_back(s.get());
    merged = coll::mergeSchedules(parts);
    schedule = &merged;
  }
  void* scratchBuffer = scratch(schedule->scratchBytes);
  if (schedule->scratchBytes > 0 && scratchBuffer == nullptr) {
    return Status(weftSystemError, formatString("%s: out of memory for %zu bytes of scratch", what, schedule->scratchBytes));
  }
  coll::ExecutionContext context{size(), what, deadline, config_.timeoutMs, abortFlag_, &mesh_, spin_.executor};
  if (arena_) context.peerInLaterCall = [this](int peer) { return arena_->published(peer, arenaSeq_ + 1); };
  return coll::executeSchedule(*schedule, operations, scratchBuffer, context);
}

}  // namespace weft::core
