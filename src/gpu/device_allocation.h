// Which allocation a device pointer lies in: its base, size and a process-wide unique id (the
// driver's buffer id: a later allocation at the same address gets a new one). What a peer
// needs to map a user's buffer through CUDA/HIP IPC, and to know when its mapping went stale.
// GPU builds only.
#pragma once

#include <cstddef>
#include <cstdint>

#include "util/status.h"

namespace weft::gpu {

struct DeviceAllocation {
  uintptr_t base = 0;
  size_t bytes = 0;
  uint64_t id = 0;
};

// The allocation holding `ptr` (device memory of the current device's context). Fails for host
// memory, and where the driver cannot tell (no driver entry points).
Result<DeviceAllocation> allocationOf(const void* ptr);

}  // namespace weft::gpu
