// Users' device buffers shared through CUDA (or HIP) IPC, call by call, so that a peer can read
// and write them in place: a rank exports the allocation its buffer lies in (a handle, and the
// buffer's offset in it), and each peer maps that allocation on first use and keeps the mapping
// until the communicator goes (closeAll). At most kMaxMappingsPerPeer stay open per peer; beyond
// that the least recently used goes.
//
// The contract: CUDA leaves undefined a cudaFree of memory that another process still maps, so
// a buffer shared this way must stay allocated until every peer has closed its mapping, that is
// until the communicator is destroyed (as NCCL's registered buffers must stay registered).
// Caching allocators (PyTorch's) keep their segments. A mapping is keyed by the exporting rank
// and the driver's buffer id, which a later allocation at the same address does not share, so a
// peer that breaks the contract and exports an allocation overlapping one mapped here at least
// gets the new memory, not the old. GPU builds only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "transport/cuda_ipc/ipc_buffers.h"
#include "util/status.h"

namespace weft::transport::cuda_ipc {

// What a peer needs to address one exported buffer. Plain bytes: it travels between processes.
struct ExportedBuffer {
  uint64_t id = 0;          // the allocation's buffer id on the exporting rank
  uint64_t base = 0;        // the allocation's address there, and its size
  uint64_t allocationBytes = 0;
  uint64_t offset = 0;      // of the buffer in the allocation
  unsigned char handle[kHandleBytes] = {};
};

class IpcUserBuffers {
 public:
  static constexpr size_t kMaxMappingsPerPeer = 64;
  // Only allocations of whole 2 MiB pages are exported: the driver packs smaller ones into
  // shared pages, and a process cannot map a page twice (a peer's second small buffer there
  // would not map).
  static constexpr size_t kMinExportBytes = size_t{2} << 20;

  explicit IpcUserBuffers(int nranks);
  ~IpcUserBuffers() { closeAll(); }  // with the communicator's device current
  IpcUserBuffers(const IpcUserBuffers&) = delete;
  IpcUserBuffers& operator=(const IpcUserBuffers&) = delete;

  // Exports this rank's buffer [ptr, ptr + bytes). Fails with weftInvalidArgument for a buffer
  // that runs past its allocation; otherwise for allocations that do not start a 2 MiB page or
  // are smaller, and memory the runtime cannot export (stream-ordered pools, virtual memory
  // management, managed memory).
  Result<ExportedBuffer> exportBuffer(const void* ptr, size_t bytes);

  // Starts a call: what map() returns from here on stays mapped until the next beginCall().
  void beginCall() { ++clock_; }

  // Where `peer`'s exported buffer is in this process, mapping its allocation on first use.
  // `quiesce` is called before any mapping is closed (a stale one, or the least recently used
  // when a peer has too many): it must wait until the work already queued is done.
  Result<unsigned char*> map(int peer, const ExportedBuffer& buffer, const std::function<Status()>& quiesce);

  // Closes every mapping (before the peers may free what they exported).
  void closeAll();

 private:
  struct Mapping {
    uint64_t id;
    uint64_t base, bytes;  // the allocation on the peer
    unsigned char* local;  // its mapping here
    uint64_t lastUse;  // the call that last took it
  };
  void close(Mapping& m);

  uint64_t clock_ = 0;
  std::vector<std::vector<Mapping>> mapped_;  // by peer
  std::vector<ExportedBuffer> exported_;      // this rank's allocations exported so far (offset 0)
};

}  // namespace weft::transport::cuda_ipc
