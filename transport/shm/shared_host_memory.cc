#include "transport/shm/shared_host_memory.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <mutex>

namespace weft::transport {

namespace {

struct Allocation {
  size_t bytes;
  int fd;
  uint64_t id;
  uint64_t device;
  uint64_t inode;
  // This process is a child made by fork since the allocation was made: its pages are its own
  // copy (privateInChild), which peers cannot map.
  bool copiedByFork = false;
};

// This process's allocations by start address.
struct Registry {
  std::mutex mutex;
  std::map<uintptr_t, Allocation> byStart;
  uint64_t lastId = 0;
};

Registry* forkRegistry = nullptr;  // what the fork handlers lock; set once, before any allocation

// A child made by fork would otherwise share every allocation's pages with its parent (they are
// a MAP_SHARED memfd), so that a write in, say, a DataLoader worker would change the parent's
// memory. The child maps each allocation again, privately and at the same address: what it
// writes stays its own. Unlike malloc's copy-on-write pages, a page the child has not written
// shows the allocation as it is now, the parent's (and its peers') later writes included.
void lockForFork() { forkRegistry->mutex.lock(); }
void unlockInParent() { forkRegistry->mutex.unlock(); }
void privateInChild() {
  for (auto& [start, a] : forkRegistry->byStart) {
    if (a.copiedByFork) continue;  // already private: fork copies it on write
    void* at = reinterpret_cast<void*>(start);
    if (mmap(at, a.bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, a.fd, 0) != MAP_FAILED) {
      a.copiedByFork = true;
      continue;
    }
    // Refused: a private writable mapping is charged against the commit limit (strict
    // overcommit), a shared one is not. The pages stay mapped, shared as before (a failed
    // MAP_FIXED may have unmapped them), and the child says so; only write(2) is safe here.
    mmap(at, a.bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, a.fd, 0);
    static constexpr char kShared[] =
        "WEFT WARN a child made by fork could not map a weftHostMemAlloc allocation privately (the memory "
        "commit was refused): its writes there reach its parent\n";
    [[maybe_unused]] const ssize_t written = write(STDERR_FILENO, kShared, sizeof(kShared) - 1);
  }
  forkRegistry->mutex.unlock();
}

Registry& registry() {
  static Registry* r = [] {
    auto* made = new Registry();  // never destroyed: frees may come from static destructors
    forkRegistry = made;
    pthread_atfork(lockForFork, unlockInParent, privateInChild);
    return made;
  }();
  return *r;
}

// Made as the library loads: a fork while another thread first made it would leave the child
// waiting for that thread, which it does not have, to finish.
[[maybe_unused]] const bool registryMadeAtLoad = (registry(), true);

}  // namespace

Result<void*> allocateSharedHostMemory(size_t bytes) {
  if (bytes == 0) return Status(weftInvalidArgument, "a shared host allocation of 0 bytes");
  // Pages come on first touch, as malloc's do (reserving them here would wake
  // the OOM killer rather than fail), but a size no RAM and swap here could
  // hold is refused.
  struct sysinfo info {};
  if (sysinfo(&info) == 0) {
    const unsigned __int128 memory = static_cast<unsigned __int128>(info.totalram + info.totalswap) * info.mem_unit;
    if (bytes > memory) {
      return Status(weftSystemError, formatString("%zu bytes of shared host memory is more than this host's memory "
                                                  "and swap (%llu bytes)",
                                                  bytes, static_cast<unsigned long long>(memory)));
    }
  }
  const int fd = memfd_create("weft-host-memory", MFD_CLOEXEC);
  if (fd < 0) return Status(weftSystemError, "memfd_create: " + errnoString(errno));
  auto failed = [fd, bytes](const char* what) {
    const int err = errno;
    close(fd);
    return Status(weftSystemError,
                  formatString("%s of %zu bytes of shared host memory: %s", what, bytes, errnoString(err).c_str()));
  };
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) return failed("ftruncate");
  struct stat st {};
  if (fstat(fd, &st) != 0) return failed("fstat");
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return failed("mmap");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.byStart[reinterpret_cast<uintptr_t>(p)] =
      Allocation{bytes, fd, ++r.lastId, static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
  return p;
}

Status freeSharedHostMemory(void* ptr) {
  Registry& r = registry();
  Allocation a{};
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    auto it = r.byStart.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == r.byStart.end()) {
      return Status(weftInvalidArgument,
                    formatString("%p is not the start of a live allocation from weftHostMemAlloc", ptr));
    }
    a = it->second;
    r.byStart.erase(it);
  }
  munmap(ptr, a.bytes);
  close(a.fd);
  return Status::ok();
}

std::optional<SharedRange> findSharedHostMemory(const void* ptr, size_t bytes) {
  Registry& r = registry();
  const auto at = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.byStart.upper_bound(at);
  if (it == r.byStart.begin()) return std::nullopt;
  --it;
  const Allocation& a = it->second;
  const uintptr_t offset = at - it->first;
  if (a.copiedByFork || offset > a.bytes || bytes > a.bytes - offset) return std::nullopt;
  return SharedRange{a.id, a.device, a.inode, a.bytes, offset, static_cast<int32_t>(getpid()), a.fd};
}

PeerAllocations::~PeerAllocations() {
  for (const Mapping& m : mappings_) munmap(m.base, m.bytes);
}

Result<char*> PeerAllocations::map(const SharedRange& range, size_t bytes) {
  if (range.allocationBytes == 0 || range.offset > range.allocationBytes ||
      bytes > range.allocationBytes - range.offset) {
    return Status(weftInternalError, formatString("a peer's buffer of %zu bytes at offset %llu lies outside its "
                                                  "allocation of %llu bytes",
                                                  bytes, static_cast<unsigned long long>(range.offset),
                                                  static_cast<unsigned long long>(range.allocationBytes)));
  }
  for (auto it = mappings_.begin(); it != mappings_.end(); ++it) {
    if (it->pid == range.pid && it->id == range.id && it->inode == range.inode && it->bytes == range.allocationBytes) {
      mappings_.splice(mappings_.begin(), mappings_, it);  // most recently used first
      return it->base + range.offset;
    }
  }
  const std::string path = formatString("/proc/%d/fd/%d", range.pid, range.fd);
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return Status(weftSystemError, "opening " + path + ": " + errnoString(errno));
  struct stat st {};
  const bool same = fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_dev) == range.device &&
                    static_cast<uint64_t>(st.st_ino) == range.inode &&
                    static_cast<uint64_t>(st.st_size) >= range.allocationBytes;
  if (!same) {
    close(fd);
    return Status(weftSystemError, path + " is not the allocation its owner named (another pid namespace?)");
  }
  void* p = mmap(nullptr, range.allocationBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  close(fd);
  if (p == MAP_FAILED) return Status(weftSystemError, "mapping " + path + ": " + errnoString(err));
  mappings_.push_front(Mapping{range.pid, range.id, range.inode, static_cast<char*>(p), range.allocationBytes});
  return static_cast<char*>(p) + range.offset;
}

void PeerAllocations::trim() {
  while (mappings_.size() > kMaxMappings) {
    munmap(mappings_.back().base, mappings_.back().bytes);
    mappings_.pop_back();
  }
}

}  // namespace weft::transport
