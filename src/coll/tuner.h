// Which algorithm runs a collective of a given size: one size-class choice per collective,
// shared by all of them. WEFT_ALGO forces a choice, either for every collective that has the
// algorithm ("ring") or per collective ("allreduce:rd,broadcast:tree"). Algorithms: ring,
// tree, rd (recursive doubling), oneshot; alltoall, gather, scatter and send/recv are direct.
// WEFT_CHUNK_BYTES sets the pipelines' chunk; WEFT_ONESHOT_MAX_BYTES bounds the bytes a rank
// sends in one-shot ((n-1) x message); WEFT_RD_MAX_BYTES and WEFT_TREE_MAX_BYTES set where
// recursive doubling (all-reduce) and trees (broadcast, reduce) hand over to the ring.
#pragma once

#include <array>
#include <optional>

#include "coll/collective.h"
#include "coll/schedules.h"
#include "util/status.h"

namespace weft::coll {

enum class Algorithm : uint8_t { Ring, Tree, RecursiveDoubling, OneShot, Direct };
const char* algorithmName(Algorithm algorithm);
// Whether `algorithm` can run `collective`.
bool hasAlgorithm(Collective collective, Algorithm algorithm);

struct TuningConfig {
  std::array<std::optional<Algorithm>, kCollectiveCount> forced;  // by Collective
  PipelineParams pipeline;
  size_t recursiveDoublingMaxBytes = 64 * 1024;
  size_t oneShotMaxBytes = 64 * 1024;
  size_t treeMaxBytes = 64 * 1024;
};

Result<TuningConfig> loadTuningConfig();

// `bytes` is the shape's: the whole buffer, or one rank's block for the blocked collectives.
Algorithm chooseAlgorithm(const TuningConfig& config, Collective collective, size_t bytes, int nranks);

// Builds the schedule of `algorithm` for `shape`.
Schedule buildSchedule(const CollectiveShape& shape, Algorithm algorithm, const PipelineParams& pipeline);

}  // namespace weft::coll
