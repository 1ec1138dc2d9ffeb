// A stream that waits on the device for a host-written flag: the GPU's front end holds the
// stream until *flag >= value (cuStreamWaitValue32 / hipStreamWaitValue32). No host thread blocks
// and no kernel spins, so host phases of any number of streams and communicators cannot wait on
// each other through a shared callback thread. GPU builds only.
#pragma once

#include <cstdint>

#include "kernels/gpu/gpu_runtime.h"

namespace weft::gpu {

// `flag` is the device address of mapped pinned memory. Returns gpuErrorNotSupported-like
// failure (not gpuSuccess) when the driver offers no stream memory operations.
gpuError_t streamWaitAtLeast(gpuStream_t stream, const uint32_t* flag, uint32_t value);

// Whether the stream is being captured into a graph (HIP 5: never reported).
bool streamIsCapturing(gpuStream_t stream);

}  // namespace weft::gpu
