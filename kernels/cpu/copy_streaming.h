// A copy that writes around the caches (non-temporal stores), for large outputs that nothing
// reads again soon: a plain store first reads each destination line into the cache (a read
// for ownership), which costs more than the write itself once the data no longer fits in
// cache. On the 2-core development VM a 64 MiB c = a + b ran 1.5x as fast with streaming
// stores as with plain ones (bench/results/2026-11-25-streaming-output.md).
#pragma once

#include <cstddef>

namespace weft::kernels {

// Copies `bytes` from src to dst (no overlap), writing dst with streaming stores where the CPU
// has them (x86-64: SSE2, always there), else with memcpy. Ends with a store fence, so the
// bytes are ordered before any later store (a completion flag another thread reads).
void copyStreaming(void* dst, const void* src, size_t bytes);

}  // namespace weft::kernels
