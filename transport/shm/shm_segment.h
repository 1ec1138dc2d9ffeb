// A POSIX shared-memory segment private to one job: created 0600 with O_EXCL under a name
// that carries a hash of the job secret and a random nonce, its pages reserved up front (so a
// full /dev/shm is an error at setup, never a SIGBUS later), and unlinked as soon as the peer
// has mapped it, so that nothing is left in /dev/shm whatever happens to the processes after.
// (A process killed between creating a segment and its peer mapping it leaves the name: its
// job's survivors remove it when their communicator fails, else the next process on the host
// to create a segment does.)
#pragma once

#include <cstddef>
#include <string>

#include "util/status.h"

namespace weft::transport {

class ShmSegment {
 public:
  ShmSegment() = default;
  ShmSegment(ShmSegment&& other) noexcept { *this = std::move(other); }
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  ~ShmSegment();

  // Names travel to the peers in fixed fields: at most this many characters.
  static constexpr size_t kMaxNameLength = 62;
  // Creates and maps a new segment of `bytes` named "/weft-<tag>-<pid namespace>.<pid>-<nonce>"
  // (48 random bits); a tag that makes it longer than kMaxNameLength is weftInternalError.
  // ENOSPC (a small /dev/shm) is weftSystemError with the size that was needed. A process's
  // first call also removes this user's segments whose creator has died (see the .cc).
  static Result<ShmSegment> create(const std::string& tag, size_t bytes);
  // Maps the segment a peer created; it must be this user's, mode 0600, and exactly `bytes`.
  // A segment with one mapper (Unlink) loses its name at once; one that several ranks map
  // (Keep) keeps it until its creator unlinks it.
  enum class Name { Unlink, Keep };
  static Result<ShmSegment> open(const std::string& name, size_t bytes, Name nameAfter = Name::Unlink);

  // Removes the name (the mapping stays). Idempotent; a name already gone is fine.
  void unlink();
  // Removes a segment name another process made, for when that process may never do it
  // itself (it died). A name already gone is fine.
  static void removeName(const std::string& name);
  // Removes this user's segments made in this pid namespace by processes now gone (zombies
  // included); returns how many. A scan of /dev/shm: for failures, not for every call.
  static int removeOrphans();
  // Whether the process that made the segment `name` is gone (or exiting, or a zombie); false
  // where that cannot be told (made in another pid namespace, whose pids mean other processes).
  static bool creatorGone(const std::string& name);

  void* data() const { return data_; }
  size_t size() const { return bytes_; }
  const std::string& name() const { return name_; }

 private:
  void release();

  void* data_ = nullptr;
  size_t bytes_ = 0;
  std::string name_;
  bool linked_ = false;
};

// Free bytes on the file system behind /dev/shm, or 0 when it cannot be read.
size_t shmFreeBytes();

}  // namespace weft::transport
