#include "core/local_rendezvous.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>

#include "util/deadline.h"
#include "util/log.h"

namespace weft::core {
namespace {

// What the file holds: the id, and the pid of the rank 0 that serves its root.
struct LocalIdFile {
  weftUniqueId id;
  int32_t pid;
};

struct ReadIdFile {
  LocalIdFile file;
  bool private_;     // a regular file of this user that nobody else may read
  time_t written;    // its modification time
};

std::optional<ReadIdFile> readIdFile(const std::string& path) {
  // O_NONBLOCK: a FIFO someone made at this path would block the open until a writer came.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return std::nullopt;
  struct stat st{};
  ReadIdFile out{};
  const bool stated = ::fstat(fd, &st) == 0;
  out.private_ = stated && S_ISREG(st.st_mode) && st.st_uid == ::getuid() && (st.st_mode & 077) == 0 &&
                 ::read(fd, &out.file, sizeof(out.file)) == static_cast<ssize_t>(sizeof(out.file));
  out.written = stated ? st.st_mtime : 0;
  ::close(fd);
  return out;
}

// When `pid` started, in seconds since the epoch; nullopt where /proc does not say.
std::optional<time_t> processStart(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t afterName = text.rfind(')');  // the command name may hold spaces and parentheses
  if (afterName == std::string::npos) return std::nullopt;
  std::istringstream fields(text.substr(afterName + 2));
  std::string field;
  for (int i = 3; i < 22 && (fields >> field); ++i) {}  // fields 3..21; starttime is field 22
  unsigned long long ticks = 0;
  if (!(fields >> ticks)) return std::nullopt;
  std::ifstream procStat("/proc/stat");
  for (std::string line; std::getline(procStat, line);) {
    if (line.rfind("btime ", 0) == 0) {
      return static_cast<time_t>(std::stoll(line.substr(6)) + static_cast<long long>(ticks / sysconf(_SC_CLK_TCK)));
    }
  }
  return std::nullopt;
}

// Whether the rank 0 that wrote a file at `written` is still running: the pid is alive and was
// not handed to a process that started after the file was written.
bool writerAlive(pid_t pid, time_t written) {
  if (pid <= 0 || (::kill(pid, 0) != 0 && errno != EPERM)) return false;
  const std::optional<time_t> started = processStart(pid);
  return !started || *started <= written + 1;  // 1 s: the boot time is only known to the second
}

}  // namespace

std::string localRendezvousPath(const std::string& jobKey) {
  return formatString("/tmp/weft-%u-%016llx.id", ::getuid(),
                      static_cast<unsigned long long>(fnv1a64(jobKey.data(), jobKey.size())));
}

Status checkNotHeldByAnotherJob(const std::string& path) {
  const int saved = errno;
  const std::optional<ReadIdFile> read = readIdFile(path);
  errno = saved;
  if (!read || !read->private_ || read->file.pid == ::getpid() || !writerAlive(read->file.pid, read->written)) {
    return Status::ok();
  }
  return Status(weftInvalidUsage,
                formatString("%s is held by the rank 0 (pid %d) of another job with the same name: give each job "
                             "its own name (MASTER_PORT, WEFT_COMM_ID, the launcher's job id)",
                             path.c_str(), static_cast<int>(read->file.pid)));
}

Status publishLocalId(const std::string& path, const UniqueIdContents& id) {
  LocalIdFile file{};
  encodeUniqueId(id, &file.id);
  file.pid = static_cast<int32_t>(::getpid());
  const std::string temp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return Status(weftSystemError, "cannot create " + temp + ": " + errnoString(errno));
  bool ok = ::write(fd, &file, sizeof(file)) == static_cast<ssize_t>(sizeof(file));
  ::close(fd);
  // link() publishes only where no file is. A file that is there is replaced (rename) unless a
  // live rank 0 other than this process owns it; so is any file where links are not supported.
  if (ok && ::link(temp.c_str(), path.c_str()) != 0) {
    if (Status held = errno == EEXIST ? checkNotHeldByAnotherJob(path) : Status::ok(); !held.isOk()) {
      ::unlink(temp.c_str());
      return held;
    }
    ok = ::rename(temp.c_str(), path.c_str()) == 0;
  }
  const int error = errno;
  ::unlink(temp.c_str());  // after link() the path keeps the file; after rename() there is no temp
  if (!ok) return Status(weftSystemError, "cannot write " + path + ": " + errnoString(error));
  return Status::ok();
}

Result<UniqueIdContents> readLocalId(const std::string& path, int timeoutMs) {
  const Deadline deadline = Deadline::afterMs(timeoutMs);
  bool toldStale = false;
  for (;;) {
    if (const std::optional<ReadIdFile> read = readIdFile(path)) {
      if (!read->private_) return Status(weftSystemError, path + " is not a private Weft id file of this user");
      if (writerAlive(read->file.pid, read->written)) return decodeUniqueId(read->file.id);
      // An earlier run's rank 0 died before removing it: wait for this run's to replace it.
      if (!toldStale) {
        WEFT_INFO("%s is left from a rank 0 that is gone (pid %d); waiting for a new one", path.c_str(), read->file.pid);
      }
      toldStale = true;
    }
    if (deadline.expired()) {
      return Status(weftTimeout, "timed out waiting for rank 0 to publish the local rendezvous in " + path);
    }
    ::usleep(2000);
  }
}

void withdrawLocalId(const std::string& path) {
  const std::optional<ReadIdFile> read = readIdFile(path);
  if (read && read->private_ && read->file.pid == ::getpid()) ::unlink(path.c_str());
}

}  // namespace weft::core
