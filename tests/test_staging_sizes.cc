// The device staging pool's sizes (src/gpu/staging_sizes.h): every request is served again by
// the buffer a request of its size allocates, so an operation's small control block does not
// take fresh pinned memory (and a cudaMalloc) every time.
#include <catch2/catch.hpp>

#include "gpu/staging_sizes.h"

using weft::gpu::stagingBytesFor;
using weft::gpu::stagingReusable;

TEST_CASE("staging: a request is served by what a request of its size allocates", "[unit]") {
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{256}, size_t{272}, size_t{1023}, size_t{4096}, size_t{4097},
                       size_t{1} << 20, (size_t{1} << 20) + 1}) {
    INFO("bytes " << bytes);
    CHECK(stagingBytesFor(bytes) >= bytes);
    CHECK(stagingReusable(stagingBytesFor(bytes), bytes));
  }
}

TEST_CASE("staging: a free buffer far larger than a fresh one is not handed out", "[unit]") {
  CHECK(stagingBytesFor(272) == 4096);
  CHECK(stagingReusable(16384, 272));
  CHECK_FALSE(stagingReusable(32768, 272));
  CHECK_FALSE(stagingReusable(size_t{64} << 20, size_t{1} << 20));
  CHECK_FALSE(stagingReusable(4096, 4097));
}
