// A CUDA driver function by name, through the runtime (cudaGetDriverEntryPointByVersion), so
// that libweft needs no libcuda at link time. CUDA builds only.
#pragma once

namespace weft::gpu {

// The function `name` as of the CUDA 12.0 driver API, or null where the driver lacks it.
void* driverEntryPoint(const char* name);

}  // namespace weft::gpu
