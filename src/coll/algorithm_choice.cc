#include "coll/algorithm_choice.h"

#include <strings.h>

#include "util/env.h"
#include "util/log.h"

namespace weft::coll {

const char* algorithmName(AllReduceAlgorithm algorithm) {
  return algorithm == AllReduceAlgorithm::Ring ? "ring" : "recursive-doubling";
}

Result<TuningConfig> loadTuningConfig() {
  TuningConfig config;
  if (auto algo = envString("WEFT_ALGO")) {
    if (strcasecmp(algo->c_str(), "ring") == 0) {
      config.forced = AllReduceAlgorithm::Ring;
    } else if (strcasecmp(algo->c_str(), "rd") == 0 || strcasecmp(algo->c_str(), "recursive-doubling") == 0) {
      config.forced = AllReduceAlgorithm::RecursiveDoubling;
    } else {
      return Status(weftInvalidArgument, "WEFT_ALGO=\"" + *algo + "\" is not one of: ring, rd");
    }
  }
  for (auto [name, target] : {std::pair{"WEFT_CHUNK_BYTES", &config.chunkBytes},
                              std::pair{"WEFT_RD_MAX_BYTES", &config.recursiveDoublingMaxBytes}}) {
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

AllReduceAlgorithm chooseAllReduce(const TuningConfig& config, size_t bytes, int /*nranks*/) {
  if (config.forced) return *config.forced;
  // Small messages are latency bound: log2(n) whole-buffer exchanges beat the ring's 2(n-1)
  // steps until bandwidth dominates. (The planner's cost model will refine this per topology.)
  return bytes <= config.recursiveDoublingMaxBytes ? AllReduceAlgorithm::RecursiveDoubling : AllReduceAlgorithm::Ring;
}

const Schedule& ScheduleCache::allReduce(const AllReduceShape& shape, AllReduceAlgorithm algorithm,
                                         const TuningConfig& config) {
  Key key{static_cast<int>(algorithm), shape.count, shape.elementSize, shape.inPlace, shape.average};
  auto it = schedules_.find(key);
  if (it != schedules_.end()) return *it->second;
  if (schedules_.size() >= kMaxEntries) schedules_.clear();
  auto schedule = std::make_unique<Schedule>(algorithm == AllReduceAlgorithm::Ring
                                                 ? buildRingAllReduce(shape, config.chunkBytes, config.slots)
                                                 : buildRecursiveDoublingAllReduce(shape));
  WEFT_INFO("all-reduce of %zu bytes on %d ranks: %s (%zu steps)", shape.count * shape.elementSize, shape.nranks,
            algorithmName(algorithm), schedule->steps.size());
  return *schedules_.emplace(key, std::move(schedule)).first->second;
}

}  // namespace weft::coll
