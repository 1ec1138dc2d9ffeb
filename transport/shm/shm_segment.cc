#include "transport/shm/shm_segment.h"

#include <dirent.h>
#include <fcntl.h>
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

#include "transport/process_liveness.h"
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

}  // namespace

bool ShmSegment::creatorGone(const std::string& name) {
  const unsigned long long mine = static_cast<unsigned long long>(pidNamespaceId());
  unsigned long long ns = 0;
  long pid = 0;
  const std::string base = name.rfind('/', 0) == 0 ? name.substr(1) : name;
  return mine != 0 && creatorOf(base, &ns, &pid) && ns == mine && pid > 0 && processGone(pid);
}

// Segments are unlinked once mapped, but a process killed before its peer mapped one (SIGKILL,
// or SIGTERM while a setup waits) leaves the name.
int ShmSegment::removeOrphans() {
  const unsigned long long mine = static_cast<unsigned long long>(pidNamespaceId());
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
  segment.name_ = formatString("/weft-%s-%llx.%ld-%012llx", tag.c_str(),
                               static_cast<unsigned long long>(pidNamespaceId()), static_cast<long>(::getpid()),
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
