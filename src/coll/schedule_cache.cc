#include "coll/schedule_cache.h"

#include "util/log.h"

namespace weft::coll {

std::shared_ptr<const Schedule> ScheduleCache::get(const CollectiveShape& shape, Algorithm algorithm, const PipelineParams& pipeline) {
  Key key = std::tuple_cat(std::tuple<int, size_t, int, size_t>(static_cast<int>(algorithm), pipeline.chunkBytes,
                                                                 pipeline.slots, pipeline.streamingMinBytes),
                           shape.key());
  auto it = schedules_.find(key);
  if (it != schedules_.end()) return it->second;
  if (schedules_.size() >= kMaxEntries) schedules_.clear();
  auto schedule = std::make_shared<const Schedule>(buildSchedule(shape, algorithm, pipeline));
  WEFT_INFO("%s of %zu bytes on %d ranks: %s%s%s%s (%zu steps)", collectiveName(shape.collective), shape.bytes(),
            shape.nranks, algorithmName(algorithm),
            schedule->channels > 1 ? formatString(" over %d channels", schedule->channels).c_str() : "",
            shape.recvReduce && isReducing(shape.collective) && algorithm != Algorithm::OneShot &&
                    algorithm != Algorithm::RecursiveDoubling
                ? ", reduce on receipt"
                : "",
            schedule->forwards > 0 ? ", forwarding" : "", schedule->steps.size());
  schedules_.emplace(key, schedule);
  return schedule;
}

}  // namespace weft::coll
