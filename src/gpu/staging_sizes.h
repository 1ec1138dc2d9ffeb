// How the device staging pool (staging_pool.h) sizes its pinned buffers and which free one it
// hands out again: kept apart from the runtime, so that a unit test checks it on any machine.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>

namespace weft::gpu {

// What a request of `bytes` allocates: a power of two, at least a page.
constexpr size_t stagingBytesFor(size_t bytes) {
  return std::max<size_t>(std::bit_ceil(std::max<size_t>(bytes, 1)), 4096);
}

// Whether a free buffer of `have` bytes serves a request of `bytes`: it fits, and it is at most
// four times what a fresh one for the request would be.
constexpr bool stagingReusable(size_t have, size_t bytes) { return have >= bytes && have / 4 <= stagingBytesFor(bytes); }

}  // namespace weft::gpu
