// Device buffers that the ranks of one host share through CUDA (or HIP) IPC: each rank allocates
// its own and exports a handle; every rank opens each peer's handle once and keeps the mapping
// (cached) until the communicator goes. Ranks may share one GPU (IPC works between processes on
// one device) or use several (peer access is enabled lazily where the GPUs have it). How the
// handles travel is the caller's business: the communicator's host transports.
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <vector>

#include "util/status.h"

namespace weft::transport::cuda_ipc {

constexpr size_t kHandleBytes = 64;  // cudaIpcMemHandle_t, hipIpcMemHandle_t
using IpcHandle = std::array<unsigned char, kHandleBytes>;

class IpcBuffers {
 public:
  // `bytes` of device memory on the current device, exported.
  static Result<std::unique_ptr<IpcBuffers>> allocate(size_t bytes);
  ~IpcBuffers();  // closes the peers' mappings, frees this rank's buffer (current device)
  IpcBuffers(const IpcBuffers&) = delete;
  IpcBuffers& operator=(const IpcBuffers&) = delete;

  const IpcHandle& handle() const { return handle_; }
  size_t bytes() const { return bytes_; }

  // Opens every rank's handle but `self`'s (handles indexed by rank).
  Status openPeers(const std::vector<IpcHandle>& handles, int self);
  // Closes the peers' mappings (before the peers free their buffers: CUDA leaves a free of
  // memory another process still maps undefined).
  void closePeers();

  // Rank r's buffer as this process addresses it (self: its own).
  unsigned char* of(int rank) const { return mapped_[static_cast<size_t>(rank)]; }

 private:
  IpcBuffers() = default;
  unsigned char* local_ = nullptr;
  size_t bytes_ = 0;
  IpcHandle handle_{};
  std::vector<unsigned char*> mapped_;  // by rank; opened peers and local_
  int self_ = -1;
};

}  // namespace weft::transport::cuda_ipc
