// Device memory and streams for `weft-perf --gpu`, through the GPU runtime Weft was built with.
// In a build without one, available() is false and nothing else may be called.
#pragma once

#include <cstddef>
#include <string>

#include "weft/weft.h"

namespace weftperf::gpu {

bool available();

// Makes this rank's GPU current: the launcher's local rank modulo the GPUs visible (several
// ranks may share one). False with *error when there is none.
bool selectDevice(std::string* error);

void* allocate(size_t bytes);  // throws std::bad_alloc
void release(void* device);
void toDevice(void* device, const void* host, size_t bytes);
void toHost(void* host, const void* device, size_t bytes);
void fill(void* device, unsigned char byte, size_t bytes);

weftStream_t createStream();
void destroyStream(weftStream_t stream);
void synchronize(weftStream_t stream);  // throws std::runtime_error on a runtime error

}  // namespace weftperf::gpu
