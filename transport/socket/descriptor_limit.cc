#include "transport/socket/descriptor_limit.h"

#include <dirent.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>

#include "util/log.h"
#include "util/status.h"

namespace weft::transport {

namespace {

// Shared-memory setup, hwloc, a host stream's wakeups: what opens descriptors besides the streams.
constexpr size_t kSpareDescriptors = 64;

// Descriptors open now, where the soft limit is `soft`: all of them where there is none left to
// read /proc with, 0 where /proc cannot say (the limit is then checked against the streams alone).
size_t openDescriptors(rlim_t soft) {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return errno == EMFILE ? static_cast<size_t>(soft) : 0;
  size_t open = 0;
  while (const dirent* entry = ::readdir(dir)) open += entry->d_name[0] != '.';
  ::closedir(dir);
  return open > 0 ? open - 1 : 0;  // not the directory's own
}

}  // namespace

void makeRoomForDescriptors(size_t more) {
  rlimit limit{};
  if (more == 0 || ::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return;
  const rlim_t want = static_cast<rlim_t>(openDescriptors(limit.rlim_cur) + more + kSpareDescriptors);
  if (want <= limit.rlim_cur) return;
  const rlim_t raised = limit.rlim_max == RLIM_INFINITY ? want : std::min(want, limit.rlim_max);
  if (raised > limit.rlim_cur) {
    const rlim_t before = limit.rlim_cur;
    limit.rlim_cur = raised;
    if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) {
      WEFT_WARN("cannot raise the limit on open files from %llu to %llu for %zu socket streams: %s",
                static_cast<unsigned long long>(before), static_cast<unsigned long long>(raised), more,
                errnoString(errno).c_str());
      return;
    }
    WEFT_INFO("raised the soft limit on open files from %llu to %llu for %zu socket streams",
              static_cast<unsigned long long>(before), static_cast<unsigned long long>(raised), more);
  }
  if (raised < want) {
    WEFT_WARN("%zu socket streams need about %llu open files, and the hard limit is %llu (ulimit -Hn): raise it, or "
              "lower WEFT_SOCKET_NSTREAMS",
              more, static_cast<unsigned long long>(want), static_cast<unsigned long long>(limit.rlim_max));
  }
}

}  // namespace weft::transport
