// Stream memory operations: a stream that waits on the device for a flag (the GPU's front end
// holds the stream until *flag >= value: cuStreamWaitValue32 / hipStreamWaitValue32), and one
// that writes a flag once its earlier work is done and visible (cuStreamWriteValue32). No host
// thread blocks and no kernel spins. Flags live in mapped pinned memory (written by a host
// thread) or in device memory (written by a peer's stream through CUDA IPC). GPU builds only.
#pragma once

#include <cstdint>

#include "kernels/gpu/gpu_runtime.h"

namespace weft::gpu {

// Whether the driver offers both operations below on the current device.
bool streamMemoryOpsAvailable();

// `flag` is a device address. CUDA compares cyclically ((int32_t)(*flag - value) >= 0), so
// counters may wrap there; HIP's hipStreamWaitValueGte compares them as unsigned numbers, so
// there they must not (kStreamWaitIsCyclic). Returns a failure (not gpuSuccess) when the driver
// offers no stream memory operations.
gpuError_t streamWaitAtLeast(gpuStream_t stream, const uint32_t* flag, uint32_t value);
#if defined(WEFT_GPU_HIP)
constexpr bool kStreamWaitIsCyclic = false;
#else
constexpr bool kStreamWaitIsCyclic = true;
#endif

// Writes `value` to the device address `flag` after the stream's earlier work, behind a memory
// fence.
gpuError_t streamWriteValue(gpuStream_t stream, uint32_t* flag, uint32_t value);

// Whether the stream is being captured into a graph (HIP 5: never reported).
bool streamIsCapturing(gpuStream_t stream);

}  // namespace weft::gpu
