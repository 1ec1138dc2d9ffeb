/* Preloaded into weft-perf by weft_perf_e2e.sh (mode checker): an all-gather that does nothing
 * when called in place (the send block inside the output, NCCL's layout) and calls Weft's
 * otherwise. weft-perf's data check must find the untouched output wrong: the timed runs before
 * it left the right answer there, so a check that does not poison the output first passes. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>

#include "weft/weft.h"

weftResult_t weftAllGather(const void* send, void* recv, size_t count, weftDataType_t type, weftComm_t comm,
                           weftStream_t stream) {
  int nranks = 1;
  if (weftCommCount(comm, &nranks) != weftSuccess) return weftInternalError;
  const uintptr_t s = (uintptr_t)send, r = (uintptr_t)recv;
  const size_t bytes = count * (size_t)nranks * 8; /* at least the output, for any type */
  if (s >= r && s < r + bytes) return weftSuccess;
  typedef weftResult_t (*AllGather)(const void*, void*, size_t, weftDataType_t, weftComm_t, weftStream_t);
  AllGather real = (AllGather)dlsym(RTLD_NEXT, "weftAllGather");
  return real != NULL ? real(send, recv, count, type, comm, stream) : weftInternalError;
}
