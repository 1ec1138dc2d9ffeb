#include "coll/algorithm_choice.h"

#include <strings.h>

#include "util/env.h"
#include "util/log.h"

namespace weft::coll {

const char* algorithmName(AllReduceAlgorithm algorithm) {
  switch (algorithm) {
    case AllReduceAlgorithm::Ring: return "ring";
    case AllReduceAlgorithm::RecursiveDoubling: return "recursive-doubling";
    case AllReduceAlgorithm::OneShot: return "one-shot";
  }
  return "?";
}

Result<TuningConfig> loadTuningConfig() {
  TuningConfig config;
  if (auto algo = envString("WEFT_ALGO")) {
    if (strcasecmp(algo->c_str(), "ring") == 0) {
      config.forced = AllReduceAlgorithm::Ring;
    } else if (strcasecmp(algo->c_str(), "rd") == 0 || strcasecmp(algo->c_str(), "recursive-doubling") == 0) {
      config.forced = AllReduceAlgorithm::RecursiveDoubling;
    } else if (strcasecmp(algo->c_str(), "oneshot") == 0 || strcasecmp(algo->c_str(), "one-shot") == 0) {
      config.forced = AllReduceAlgorithm::OneShot;
    } else {
      return Status(weftInvalidArgument, "WEFT_ALGO=\"" + *algo + "\" is not one of: ring, rd, oneshot");
    }
  }
  for (auto [name, target] : {std::pair{"WEFT_CHUNK_BYTES", &config.chunkBytes},
                              std::pair{"WEFT_RD_MAX_BYTES", &config.recursiveDoublingMaxBytes},
                              std::pair{"WEFT_ONESHOT_MAX_BYTES", &config.oneShotMaxBytes}}) {
    if (auto text = envString(name)) {
      auto bytes = parseByteSize(*text);
      if (!bytes || *bytes == 0 || *bytes > (1ull << 32)) {
        return Status(weftInvalidArgument, std::string(name) + "=\"" + *text + "\" is not a size between 1 and 4G");
      }
      *target = *bytes;
    }
  }
  return config;
}

AllReduceAlgorithm chooseAllReduce(const TuningConfig& config, size_t bytes, int nranks) {
  if (config.forced) return *config.forced;
  // Small messages are latency bound: one round of n-1 concurrent exchanges while the bytes a
  // rank sends stay small, then log2(n) rounds of whole-buffer exchanges, and the ring's 2(n-1)
  // pipelined steps once bandwidth dominates. (The planner's cost model will refine this.)
  if (bytes * static_cast<size_t>(nranks - 1) <= config.oneShotMaxBytes) return AllReduceAlgorithm::OneShot;
  return bytes <= config.recursiveDoublingMaxBytes ? AllReduceAlgorithm::RecursiveDoubling : AllReduceAlgorithm::Ring;
}

namespace {
Schedule build(const AllReduceShape& shape, AllReduceAlgorithm algorithm, const TuningConfig& config) {
  switch (algorithm) {
    case AllReduceAlgorithm::Ring: return buildRingAllReduce(shape, config.chunkBytes, config.slots);
    case AllReduceAlgorithm::RecursiveDoubling: return buildRecursiveDoublingAllReduce(shape);
    case AllReduceAlgorithm::OneShot: return buildOneShotAllReduce(shape);
  }
  return {};
}
}  // namespace

const Schedule& ScheduleCache::allReduce(const AllReduceShape& shape, AllReduceAlgorithm algorithm,
                                         const TuningConfig& config) {
  Key key{static_cast<int>(algorithm), shape.count, shape.elementSize, shape.inPlace, shape.average, shape.recvReduce};
  auto it = schedules_.find(key);
  if (it != schedules_.end()) return *it->second;
  if (schedules_.size() >= kMaxEntries) schedules_.clear();
  auto schedule = std::make_unique<Schedule>(build(shape, algorithm, config));
  WEFT_INFO("all-reduce of %zu bytes on %d ranks: %s%s (%zu steps)", shape.count * shape.elementSize, shape.nranks,
            algorithmName(algorithm), shape.recvReduce && algorithm == AllReduceAlgorithm::Ring ? ", reduce on receipt" : "",
            schedule->steps.size());
  return *schedules_.emplace(key, std::move(schedule)).first->second;
}

}  // namespace weft::coll
