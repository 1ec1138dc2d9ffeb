// Schedules built once per (shape, algorithm, pipeline) and reused; bounded so that a size
// sweep does not grow it forever.
#pragma once

#include <map>
#include <memory>

#include "coll/tuner.h"

namespace weft::coll {

class ScheduleCache {
 public:
  // Shared, so that a schedule in use outlives its eviction.
  std::shared_ptr<const Schedule> get(const CollectiveShape& shape, Algorithm algorithm, const PipelineParams& pipeline);

 private:
  using Key = decltype(std::tuple_cat(std::tuple<int, size_t, int, size_t>(), CollectiveShape{}.key()));
  static constexpr size_t kMaxEntries = 64;
  std::map<Key, std::shared_ptr<const Schedule>> schedules_;
};

}  // namespace weft::coll
