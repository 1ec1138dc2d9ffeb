// Which all-reduce algorithm runs for a given size, and a cache of built schedules.
// WEFT_ALGO=ring|rd|oneshot forces one; WEFT_CHUNK_BYTES sets the ring's pipeline chunk;
// WEFT_ONESHOT_MAX_BYTES bounds the bytes a rank sends in one-shot ((n-1) x message);
// WEFT_RD_MAX_BYTES sets where recursive doubling hands over to the ring.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <tuple>

#include "coll/allreduce_schedules.h"

namespace weft::coll {

enum class AllReduceAlgorithm { Ring, RecursiveDoubling, OneShot };
const char* algorithmName(AllReduceAlgorithm algorithm);

struct TuningConfig {
  std::optional<AllReduceAlgorithm> forced;
  size_t chunkBytes = 512 * 1024;
  int slots = 4;
  size_t recursiveDoublingMaxBytes = 64 * 1024;
  size_t oneShotMaxBytes = 64 * 1024;
};

Result<TuningConfig> loadTuningConfig();

AllReduceAlgorithm chooseAllReduce(const TuningConfig& config, size_t bytes, int nranks);

// Schedules built once per shape and reused; bounded so a size sweep does not grow it forever.
class ScheduleCache {
 public:
  const Schedule& allReduce(const AllReduceShape& shape, AllReduceAlgorithm algorithm, const TuningConfig& config);

 private:
  using Key = std::tuple<int, size_t, size_t, bool, bool, bool>;
  static constexpr size_t kMaxEntries = 64;
  std::map<Key, std::unique_ptr<Schedule>> schedules_;
};

}  // namespace weft::coll
