#include "transport/cuda_ipc/ipc_buffers.h"

#include <cstring>

#include "gpu/device_memory.h"
#include "kernels/gpu/gpu_runtime.h"

namespace weft::transport::cuda_ipc {
namespace {

Status check(gpuError_t err, const char* what) {
  if (err == gpuSuccess) return Status::ok();
  (void)gpuGetLastError();
  return gpu::runtimeError(err, what);
}

}  // namespace

Result<std::unique_ptr<IpcBuffers>> IpcBuffers::allocate(size_t bytes) {
  std::unique_ptr<IpcBuffers> buffers(new IpcBuffers);
  void* p = nullptr;
  WEFT_TRY(check(gpuMalloc(&p, bytes), "allocating the CUDA IPC buffer"));
  buffers->local_ = static_cast<unsigned char*>(p);
  buffers->bytes_ = bytes;
  // Zeroed, so that signal counters start at 0 (a peer may map it before this rank's first use).
  WEFT_TRY(check(gpuMemsetAsync(p, 0, bytes, nullptr), "clearing the CUDA IPC buffer"));
  WEFT_TRY(check(gpuStreamSynchronize(nullptr), "clearing the CUDA IPC buffer"));
  gpuIpcMemHandle_t handle;
  WEFT_TRY(check(gpuIpcGetMemHandle(&handle, p), "exporting the CUDA IPC buffer"));
  static_assert(sizeof handle == kHandleBytes);
  std::memcpy(buffers->handle_.data(), &handle, kHandleBytes);
  return buffers;
}

Status IpcBuffers::openPeers(const std::vector<IpcHandle>& handles, int self) {
  self_ = self;
  mapped_.assign(handles.size(), nullptr);
  for (size_t r = 0; r < handles.size(); ++r) {
    if (static_cast<int>(r) == self) {
      mapped_[r] = local_;
      continue;
    }
    gpuIpcMemHandle_t handle;
    std::memcpy(&handle, handles[r].data(), kHandleBytes);
    void* p = nullptr;
    WEFT_TRY(check(gpuIpcOpenMemHandle(&p, handle, gpuIpcMemLazyEnablePeerAccess),
                   formatString("opening rank %zu's CUDA IPC buffer", r).c_str()));
    mapped_[r] = static_cast<unsigned char*>(p);
  }
  return Status::ok();
}

void IpcBuffers::closePeers() {
  for (size_t r = 0; r < mapped_.size(); ++r) {
    if (static_cast<int>(r) != self_ && mapped_[r] != nullptr) (void)gpuIpcCloseMemHandle(mapped_[r]);
    if (static_cast<int>(r) != self_) mapped_[r] = nullptr;
  }
  (void)gpuGetLastError();
}

IpcBuffers::~IpcBuffers() {
  closePeers();
  if (local_ != nullptr) (void)gpuFree(local_);
  (void)gpuGetLastError();
}

}  // namespace weft::transport::cuda_ipc
