/* The C API from C11: the initializer macros expand in C, and weftGroupSimulateEnd prices a
 * group over two communicators (two ranks of one clique, driven by this one thread) as the
 * slower of the two, since they run side by side: not as their sum. Nothing runs, so one
 * thread can price both ranks' calls without ever waiting for a peer. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "weft/weft.h"

#define CHECK(cond, ...)                 \
  do {                                   \
    if (!(cond)) {                       \
      fprintf(stderr, "FAILED: " #cond " -- "); \
      fprintf(stderr, __VA_ARGS__);      \
      fprintf(stderr, "\n");             \
      exit(1);                           \
    }                                    \
  } while (0)

static float* small_in;
static float* small_out;
static float* large_in;
static float* large_out;
enum { kSmall = 1 << 18, kLarge = 1 << 22 }; /* 1 MiB and 16 MiB of float */

/* The price of a group holding an all-reduce of `small` on `a` (if not NULL) and of `large` on
 * `b` (if not NULL). */
static float price(weftComm_t a, weftComm_t b) {
  weftSimInfo_t info = WEFT_SIM_INFO_INITIALIZER;
  CHECK(isnan(info.estimatedTime) && info.size == sizeof(weftSimInfo_t), "the initializer");
  CHECK(weftGroupStart() == weftSuccess, "%s", weftGetLastError(NULL));
  if (a) CHECK(weftAllReduce(small_in, small_out, kSmall, weftFloat32, weftSum, a, NULL) == weftSuccess, "small");
  if (b) CHECK(weftAllReduce(large_in, large_out, kLarge, weftFloat32, weftSum, b, NULL) == weftSuccess, "large");
  CHECK(weftGroupSimulateEnd(&info) == weftSuccess, "%s", weftGetLastError(NULL));
  return info.estimatedTime;
}

int main(void) {
  weftConfig_t config = WEFT_CONFIG_INITIALIZER; /* expands in C too */
  CHECK(config.size == sizeof(weftConfig_t), "the config initializer");
  weftComm_t comms[2];
  CHECK(weftCommInitAll(comms, 2, NULL) == weftSuccess, "%s", weftGetLastError(NULL));
  small_in = calloc(kSmall, sizeof(float));
  small_out = calloc(kSmall, sizeof(float));
  large_in = calloc(kLarge, sizeof(float));
  large_out = calloc(kLarge, sizeof(float));
  CHECK(small_in && small_out && large_in && large_out, "out of memory");

  const float small = price(comms[0], NULL), large = price(NULL, comms[1]), both = price(comms[0], comms[1]);
  printf("1 MiB on one communicator: %.1f us; 16 MiB on the other: %.1f us; both in one group: %.1f us\n", small,
         large, both);
  CHECK(small > 0 && large > small, "small %g, large %g", small, large);
  CHECK(both == large, "side by side the group takes the slower communicator's %g us, not %g", large, both);

  CHECK(weftCommDestroy(comms[0]) == weftSuccess && weftCommDestroy(comms[1]) == weftSuccess, "destroy");
  free(small_in);
  free(small_out);
  free(large_in);
  free(large_out);
  return 0;
}
