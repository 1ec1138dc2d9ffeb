// Which algorithm runs a collective of a given size: the cheapest by the alpha-beta cost model
// (cost_model.h) among the algorithms the collective has, for the communicator's slowest link
// class. WEFT_ALGO forces a choice, either for every collective that has the algorithm ("ring")
// or per collective ("allreduce:rd,broadcast:tree"). Algorithms: ring, tree, rd (recursive
// doubling), oneshot; alltoall, gather, scatter and send/recv are direct. WEFT_CHUNK_BYTES sets
// the pipelines' chunk (by default, by transport: schedules.h). Memory caps on what the model may pick: WEFT_ONESHOT_MAX_BYTES bounds
// one-shot's (n-1) x message of scratch, WEFT_RD_MAX_BYTES recursive doubling's message, and
// WEFT_TREE_MAX_BYTES the trees' message. WEFT_TUNE=measure fits the model to all-reduces timed at
// init (core/link_measurement.cc).
#pragma once

#include <array>
#include <optional>

#include "coll/collective.h"
#include "coll/cost_model.h"
#include "coll/schedules.h"
#include "util/status.h"

namespace weft::coll {

const char* algorithmName(Algorithm algorithm);
// Whether `algorithm` can run `collective`.
bool hasAlgorithm(Collective collective, Algorithm algorithm);

struct TuningConfig {
  std::array<std::optional<Algorithm>, kCollectiveCount> forced;  // by Collective
  PipelineParams pipeline;
  bool chunkBytesSet = false;  // WEFT_CHUNK_BYTES given; otherwise init picks by transport
  size_t recursiveDoublingMaxBytes = 64 * 1024;
  size_t oneShotMaxBytes = 64 * 1024;
  size_t treeMaxBytes = 1 << 20;
  bool measureLinks = false;  // WEFT_TUNE=measure
};

Result<TuningConfig> loadTuningConfig();

// The chunk a communicator pipelines with, unless WEFT_CHUNK_BYTES set it: by the slowest link
// any pair uses (kSocketChunkBytes where one is a socket, else kSharedMemoryChunkBytes). Init
// and weft-topo --predict both take it from here, so their predictions agree.
void chooseChunkBytes(TuningConfig* config, bool anySocket);

// A digest of the settings every rank must share, so init compares every rank's: ranks whose
// `config` differs (WEFT_ALGO, WEFT_TUNE, WEFT_CHUNK_BYTES and the WEFT_*_MAX_BYTES caps) would
// choose different algorithms or chunk sizes for one call, and a pair whose `streamsPerPeer`
// differs (WEFT_SOCKET_NSTREAMS) would wait for a stream that never comes.
uint16_t settingsDigest(const TuningConfig& config, int streamsPerPeer);

// `bytes` is the shape's: the whole buffer, or one rank's block for the blocked collectives, in
// elements of elementSize bytes. The cheapest by the model, except that where ranks share CPUs a
// tree all-reduce displaces the ring only when priced well under it (tuner.cc).
Algorithm chooseAlgorithm(const TuningConfig& config, const LinkCost& link, const CommLayout& layout,
                          Collective collective, size_t bytes, size_t elementSize);

// The model's price of every algorithm `collective` has, for WEFT_DEBUG=INFO: "ring 12.1 us,
// tree 13.0 us, ..." (bench/tuner_accuracy.py reads it back).
std::string describePredictions(const TuningConfig& config, const LinkCost& link, const CommLayout& layout,
                                Collective collective, size_t bytes, size_t elementSize);

// Builds the schedule of `algorithm` for `shape`.
Schedule buildSchedule(const CollectiveShape& shape, Algorithm algorithm, const PipelineParams& pipeline);

}  // namespace weft::coll
