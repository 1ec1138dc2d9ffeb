// Setting up a shared-memory connection between two ranks on one host, over the TCP stream
// they already share: each side creates its outbound ring, they swap names, map each other's
// (which unlinks the names), check that process_vm_readv works between them, and keep the
// TCP stream as the control channel. If shared memory cannot be had (a full /dev/shm, a peer
// that declines), the pair stays on sockets with a WARN saying why and what to set, unless
// WEFT_TRANSPORT=shm demands it, which makes that a weftSystemError.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/shm/slot_stores.h"
#include "transport/socket/socket_util.h"
#include "transport/transport.h"

namespace weft::transport {

enum class ShmPolicy { Auto, Never, Required };

struct ShmOptions {
  ShmPolicy policy = ShmPolicy::Auto;
  uint32_t slots = 16;
  uint32_t slotBytes = 64 * 1024;
  // Messages at least this large are read straight from the sender's buffer with
  // process_vm_readv; the others are copied through the ring. Off by default: the ring stays in
  // the shared cache, and the receiver reduces straight out of it (postRecvReduce), so the ring
  // moved more data per second than process_vm_readv's page pinning on every machine we tried.
  size_t remoteReadMinBytes = SIZE_MAX;
  // A ring's receive writes what it passes on straight into the next connection's slot
  // (transport::Forward). WEFT_SHM_FORWARD=0 turns it off, to measure what it saves.
  bool forward = true;
  // How large slot pieces are written (slot_stores.h): WEFT_SHM_SLOT_STORES.
  shm::SlotStoresPolicy slotStores = shm::SlotStoresPolicy::Adaptive;
};

// WEFT_TRANSPORT=socket|shm (unset: shm between ranks on one host), WEFT_SHM_DISABLE=1,
// WEFT_SHM_SLOTS, WEFT_SHM_SLOT_BYTES, WEFT_SHM_REMOTE_READ_MIN_BYTES ("never" disables it),
// WEFT_SHM_FORWARD, WEFT_SHM_SLOT_STORES.
Result<ShmOptions> shmOptionsFromEnv();

// Whether this process may read `pid`'s memory with process_vm_readv (Yama's ptrace_scope and
// container policies forbid it between sibling processes on some machines): reads the 8 bytes
// at `address` there and compares them with `expected`.
bool canReadRemote(pid_t pid, uint64_t address, uint64_t expected);

struct ShmPeer {
  int rank;
  std::string name;  // host name, for messages
  pid_t pid;
};

// Both sides call this with the pair's streams; on success the first stream moves into the
// returned connection and the others close. nullptr: stay on sockets, streams untouched.
Result<std::unique_ptr<Connection>> establishShm(const ShmPeer& peer, std::vector<UniqueFd>& streams,
                                                 const std::string& tag, const ShmOptions& options,
                                                 const Deadline& deadline, const std::atomic<bool>* abortFlag);

}  // namespace weft::transport
