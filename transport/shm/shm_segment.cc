#include "transport/shm/shm_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "transport/socket/socket_util.h"
#include "util/log.h"

namespace weft::transport {

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    name_ = std::move(other.name_);
    linked_ = std::exchange(other.linked_, false);
  }
  return *this;
}

ShmSegment::~ShmSegment() { release(); }

void ShmSegment::release() {
  unlink();
  if (data_ != nullptr) ::munmap(data_, bytes_);
  data_ = nullptr;
  bytes_ = 0;
}

void ShmSegment::removeName(const std::string& name) { (void)::shm_unlink(name.c_str()); }

void ShmSegment::unlink() {
  if (linked_) removeName(name_);
  linked_ = false;
}

size_t shmFreeBytes() {
  struct statvfs fs{};
  if (::statvfs("/dev/shm", &fs) != 0) return 0;
  return static_cast<size_t>(fs.f_bavail) * fs.f_frsize;
}

namespace {

// Pids in names compare only within one pid namespace (containers may share /dev/shm).
unsigned long long pidNamespace() {
  struct stat st{};
  return ::stat("/proc/self/ns/pid", &st) == 0 ? static_cast<unsigned long long>(st.st_ino) : 0;
}

// The creator written into a segment's name: "weft-<tag>-<pid namespace>.<pid>-<nonce>".
bool creatorOf(const std::string& name, unsigned long long* ns, long* pid) {
  const size_t nonceDash = name.rfind('-');
  if (nonceDash == std::string::npos || nonceDash == 0) return false;
  const size_t creatorDash = name.rfind('-', nonceDash - 1);
  if (creatorDash == std::string::npos) return false;
  const std::string creator = name.substr(creatorDash + 1, nonceDash - creatorDash - 1);
  char tail = 0;
  return std::sscanf(creator.c_str(), "%llx.%ld%c", ns, pid, &tail) == 2;
}

enum class TaskState { Running, Going, Gone, Unknown };

// One task's state from its /proc stat file: Going when a zombie or exiting (PF_EXITING), Gone
// when it has no file any more, Unknown when the file cannot be read.
TaskState taskState(const std::string& statPath) {
  FILE* file = std::fopen(statPath.c_str(), "re");
  if (file == nullptr) return errno == ENOENT || errno == ESRCH ? TaskState::Gone : TaskState::Unknown;
  char line[512] = {};
  const size_t got = std::fread(line, 1, sizeof(line) - 1, file);
  std::fclose(file);
  // "pid (comm) state ppid pgrp session tty_nr tpgid flags ...": comm may hold spaces and
  // parentheses, so the fields start after the last ')'.
  const char* close = got > 0 ? std::strrchr(line, ')') : nullptr;
  char state = 0;
  unsigned long flags = 0;
  if (close == nullptr || std::sscanf(close + 1, " %c %*d %*d %*d %*d %*d %lu", &state, &flags) != 2) {
    return TaskState::Unknown;
  }
  constexpr unsigned long kPfExiting = 0x4;  // include/linux/sched.h
  return state == 'Z' || state == 'X' || (flags & kPfExiting) != 0 ? TaskState::Going : TaskState::Running;
}

// Whether /proc shows this process's pid namespace (it may be absent, or the host's).
bool procIsOurs() {
  static const bool ours = [] {
    long pid = 0;
    FILE* file = std::fopen("/proc/self/stat", "re");
    if (file == nullptr) return false;
    const bool read = std::fscanf(file, "%ld", &pid) == 1;
    std::fclose(file);
    return read && pid == ::getpid();
  }();
  return ours;
}

// Whether the process is gone or going: no such pid, or every one of its threads a zombie or
// exiting. A zombie its parent has not reaped yet (a launcher that waits for its last child)
// counts, and so does a rank killed a moment ago, whose closed sockets its peers may see
// before it is a zombie. When in doubt it is alive: this fails live collectives when wrong.
bool processGone(long pid) {
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return true;
  if (!procIsOurs()) return false;
  const std::string dir = "/proc/" + std::to_string(pid);
  // The leader's state is the process's unless it left early (pthread_exit in main): then the
  // other threads say whether the process lives.
  if (taskState(dir + "/stat") != TaskState::Going) return false;
  DIR* tasks = ::opendir((dir + "/task").c_str());
  if (tasks == nullptr) return errno == ENOENT;
  bool going = true;
  while (const dirent* entry = ::readdir(tasks)) {
    if (entry->d_name[0] == '.') continue;
    const TaskState state = taskState(dir + "/task/" + entry->d_name + "/stat");
    if (state == TaskState::Running || state == TaskState::Unknown) {
      going = false;
      break;
    }
  }
  ::closedir(tasks);
  return going;
}

}  // namespace

bool ShmSegment::creatorGone(const std::string& name) {
  const unsigned long long mine = pidNamespace();
  unsigned long long ns = 0;
  long pid = 0;
  const std::string base = name.rfind('/', 0) == 0 ? name.substr(1) : name;
  return mine != 0 && creatorOf(base, &ns, &pid) && ns == mine && pid > 0 && processGone(pid);
}

// Segments are unlinked once mapped, but a process killed before its peer mapped one (SIGKILL,
// or SIGTERM while a setup waits) leaves the name.
int ShmSegment::removeOrphans() {
  const unsigned long long mine = pidNamespace();
  if (mine == 0) return 0;  // unknown: another container's pids could look like ours
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return 0;
  int removed = 0;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.rfind("weft-", 0) != 0) continue;
    struct stat st{};
    unsigned long long ns = 0;
    long pid = 0;
    if (::fstatat(::dirfd(dir), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || st.st_uid != ::getuid()) continue;
    if (!creatorOf(name, &ns, &pid) || ns != mine || pid <= 0) continue;
    if (!processGone(pid)) continue;
    if (::shm_unlink(("/" + name).c_str()) == 0) ++removed;
  }
  ::closedir(dir);
  if (removed > 0) WEFT_INFO("removed %d shared-memory segment(s) left in /dev/shm by processes that died", removed);
  return removed;
}

Result<ShmSegment> ShmSegment::create(const std::string& tag, size_t bytes) {
  static std::once_flag swept;
  std::call_once(swept, [] { removeOrphans(); });
  uint64_t nonce = 0;
  if (::getrandom(&nonce, sizeof(nonce), 0) != static_cast<ssize_t>(sizeof(nonce))) {
    return Status(weftSystemError, "getrandom: " + errnoString(errno));
  }
  ShmSegment segment;
  segment.name_ = formatString("/weft-%s-%llx.%ld-%012llx", tag.c_str(), pidNamespace(), static_cast<long>(::getpid()),
                               static_cast<unsigned long long>(nonce & 0xffffffffffffull));
  if (segment.name_.size() > kMaxNameLength) {
    return Status(weftInternalError, "the shared-memory segment name " + segment.name_ + " is too long");
  }
  UniqueFd fd(::shm_open(segment.name_.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600));
  if (!fd.valid()) {
    return Status(weftSystemError, "cannot create shared memory " + segment.name_ + ": " + errnoString(errno));
  }
  segment.linked_ = true;
  // Reserve every page now: on a full tmpfs this fails with ENOSPC instead of the first touch
  // of an unbacked page killing the process with SIGBUS.
  int err;
  do {
    err = ::posix_fallocate(fd.get(), 0, static_cast<off_t>(bytes));  // tmpfs gives up on any signal
  } while (err == EINTR);
  if (err != 0) {
    return Status(weftSystemError,
                  formatString("cannot reserve %zu bytes of shared memory in /dev/shm (%zu free): %s", bytes,
                               shmFreeBytes(), errnoString(err).c_str()));
  }
  // MAP_POPULATE: map every page now, so the first messages through the ring take no faults.
  void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd.get(), 0);
  if (data == MAP_FAILED) return Status(weftSystemError, "mmap of " + segment.name_ + ": " + errnoString(errno));
  segment.data_ = data;
  segment.bytes_ = bytes;
  return segment;
}

Result<ShmSegment> ShmSegment::open(const std::string& name, size_t bytes, Name nameAfter) {
  if (name.size() < 7 || name.compare(0, 6, "/weft-") != 0 || name.find('/', 1) != std::string::npos) {
    return Status(weftRemoteError, "the peer named an invalid shared-memory segment");
  }
  UniqueFd fd(::shm_open(name.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0));
  if (!fd.valid()) return Status(weftSystemError, "cannot open shared memory " + name + ": " + errnoString(errno));
  struct stat st{};
  if (::fstat(fd.get(), &st) != 0) return Status(weftSystemError, "fstat of " + name + ": " + errnoString(errno));
  if (st.st_uid != ::geteuid() || (st.st_mode & 0777) != 0600 || static_cast<size_t>(st.st_size) != bytes) {
    return Status(weftRemoteError,
                  formatString("shared memory %s is not the peer's private segment (owner %u, mode %o, %lld bytes)",
                               name.c_str(), st.st_uid, st.st_mode & 0777, static_cast<long long>(st.st_size)));
  }
  void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd.get(), 0);
  if (data == MAP_FAILED) return Status(weftSystemError, "mmap of " + name + ": " + errnoString(errno));
  ShmSegment segment;
  segment.name_ = name;
  segment.data_ = data;
  segment.bytes_ = bytes;
  if (nameAfter == Name::Unlink) {
    segment.linked_ = true;  // mapped now: the name can go
    segment.unlink();
  }
  return segment;
}

}  // namespace weft::transport
