// weftHostMemAlloc / weftHostMemFree: host memory the ranks of one host read
// from each other directly (transport/shm/shared_host_memory.h).
#include "api/comm_handle.h"
#include "transport/shm/shared_host_memory.h"

using namespace weft;

extern "C" WEFT_API weftResult_t weftHostMemAlloc(void** ptr, size_t size) {
  if (ptr == nullptr) return api::reportError(Status(weftInvalidArgument, "weftHostMemAlloc: ptr is NULL"));
  if (size == 0) return api::reportError(Status(weftInvalidArgument, "weftHostMemAlloc: size is 0"));
  Result<void*> made = transport::allocateSharedHostMemory(size);
  if (!made.isOk())
    return api::reportError(Status(made.status().code(), "weftHostMemAlloc: " + made.status().message()));
  *ptr = made.value();
  return weftSuccess;
}

extern "C" WEFT_API weftResult_t weftHostMemFree(void* ptr) {
  if (ptr == nullptr) return weftSuccess;  // as free(NULL)
  Status freed = transport::freeSharedHostMemory(ptr);
  if (!freed.isOk()) return api::reportError(Status(freed.code(), "weftHostMemFree: " + freed.message()));
  return weftSuccess;
}
