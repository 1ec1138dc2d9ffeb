#include "transport/cuda_ipc/ipc_user_buffers.h"

#include <algorithm>
#include <cstring>

#include "gpu/device_allocation.h"
#include "gpu/device_memory.h"
#include "kernels/gpu/gpu_runtime.h"

namespace weft::transport::cuda_ipc {
namespace {

bool overlaps(uint64_t base, uint64_t bytes, uint64_t otherBase, uint64_t otherBytes) {
  return base < otherBase + otherBytes && otherBase < base + bytes;
}

}  // namespace

IpcUserBuffers::IpcUserBuffers(int nranks) : mapped_(static_cast<size_t>(nranks)) {}

void IpcUserBuffers::closeAll() {
  for (auto& peer : mapped_) {
    for (Mapping& m : peer) close(m);
    peer.clear();
  }
}

void IpcUserBuffers::close(Mapping& m) {
  if (m.local != nullptr && gpuIpcCloseMemHandle(m.local) != gpuSuccess) (void)gpuGetLastError();
  m.local = nullptr;
}

Result<ExportedBuffer> IpcUserBuffers::exportBuffer(const void* ptr, size_t bytes) {
  WEFT_ASSIGN_OR_RETURN(gpu::DeviceAllocation a, gpu::allocationOf(ptr));
  const auto at = reinterpret_cast<uintptr_t>(ptr);
  if (at - a.base + bytes > a.bytes) {
    return Status(weftInvalidArgument, formatString("the buffer at %p holds fewer than the call's %zu bytes (its "
                                                    "allocation ends %zu bytes after it)",
                                                    ptr, bytes, a.bytes - (at - a.base)));
  }
  if (a.bytes < kMinExportBytes || a.base % kMinExportBytes != 0) {
    return Status(weftUnhandledCudaError, formatString("the buffer at %p lies in an allocation of %zu bytes at %p: "
                                                       "Weft shares through CUDA IPC only allocations of whole 2 MiB "
                                                       "pages",
                                                       ptr, a.bytes, reinterpret_cast<void*>(a.base)));
  }
  auto known = std::find_if(exported_.begin(), exported_.end(), [&](const ExportedBuffer& e) { return e.id == a.id; });
  if (known == exported_.end()) {
    // Allocations this one overlaps were freed: forget them.
    std::erase_if(exported_, [&](const ExportedBuffer& e) { return overlaps(e.base, e.allocationBytes, a.base, a.bytes); });
    gpuIpcMemHandle_t handle;
    if (gpuError_t err = gpuIpcGetMemHandle(&handle, reinterpret_cast<void*>(a.base)); err != gpuSuccess) {
      (void)gpuGetLastError();
      return gpu::runtimeError(err, "exporting the buffer's allocation");
    }
    ExportedBuffer e{a.id, a.base, a.bytes, 0, {}};
    static_assert(sizeof handle == kHandleBytes);
    std::memcpy(e.handle, &handle, kHandleBytes);
    exported_.push_back(e);
    known = exported_.end() - 1;
  }
  ExportedBuffer out = *known;
  out.offset = at - a.base;
  return out;
}

Result<unsigned char*> IpcUserBuffers::map(int peer, const ExportedBuffer& buffer,
                                           const std::function<Status()>& quiesce) {
  if (buffer.offset > buffer.allocationBytes) {
    return Status(weftInternalError, formatString("rank %d exported an offset past its allocation", peer));
  }
  std::vector<Mapping>& mine = mapped_[static_cast<size_t>(peer)];
  for (Mapping& m : mine) {
    if (m.id == buffer.id) {
      m.lastUse = clock_;
      return m.local + buffer.offset;
    }
  }
  // Mappings the new allocation overlaps are stale: the peer freed them (against the contract:
  // see the header), and this call, at least, must not use them. Whatever this call already
  // took stays, whatever the peer reports.
  auto stale = [&](const Mapping& m) {
    return m.lastUse != clock_ && overlaps(m.base, m.bytes, buffer.base, buffer.allocationBytes);
  };
  const bool closing = std::any_of(mine.begin(), mine.end(), stale) || mine.size() >= kMaxMappingsPerPeer;
  if (closing) WEFT_TRY(quiesce());
  std::erase_if(mine, [&](Mapping& m) {
    if (!stale(m)) return false;
    close(m);
    return true;
  });
  if (mine.size() >= kMaxMappingsPerPeer) {
    auto oldest = std::min_element(mine.begin(), mine.end(),
                                   [](const Mapping& a, const Mapping& b) { return a.lastUse < b.lastUse; });
    if (oldest->lastUse != clock_) {
      close(*oldest);
      mine.erase(oldest);
    }
  }
  gpuIpcMemHandle_t handle;
  std::memcpy(&handle, buffer.handle, kHandleBytes);
  void* p = nullptr;
  if (gpuError_t err = gpuIpcOpenMemHandle(&p, handle, gpuIpcMemLazyEnablePeerAccess); err != gpuSuccess) {
    (void)gpuGetLastError();
    return gpu::runtimeError(err, formatString("mapping rank %d's buffer", peer));
  }
  mine.push_back(Mapping{buffer.id, buffer.base, buffer.allocationBytes, static_cast<unsigned char*>(p), clock_});
  return static_cast<unsigned char*>(p) + buffer.offset;
}

}  // namespace weft::transport::cuda_ipc
