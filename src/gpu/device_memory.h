// What the rest of Weft asks of the GPU runtime before it treats a buffer as device memory.
// In a build without CUDA or HIP every pointer is host memory and there is no current device.
#pragma once

#include <string>

#include "util/status.h"

namespace weft::gpu {

// Whether this library was built with a GPU runtime (WEFT_CUDA or WEFT_HIP).
bool builtWithGpu();

// GPUs this process sees (0 without a GPU runtime or driver). Unless loadDriver, a process that
// has not touched the GPU yet (no driver loaded) counts as seeing none, and stays untouched.
int deviceCount(bool loadDriver = false);

// The calling thread's current device, or -1 (no GPU runtime, or no device visible).
int currentDevice();

// The PCI bus id of `device` ("0000:3b:00.0", as the runtime writes it), or "" where there is
// no such device.
std::string pciBusId(int device);

// Whether `ptr` is device memory (managed memory counts); *device is set to its device.
bool isDeviceMemory(const void* ptr, int* device);

// weftUnhandledCudaError carrying the runtime's own message: "<what>: <runtime error text>".
Status runtimeError(int error, const std::string& what);

}  // namespace weft::gpu
