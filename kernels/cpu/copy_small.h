// Copies of a few bytes without a call into the C library: a memcpy of a size known only at run
// time is a call of about 30 instructions, which is most of the work for the 8-byte payloads of
// a latency-bound collective. A size in [n, 2n) becomes two overlapping n-byte copies (of the
// head and of the tail), which the compiler turns into a load and a store each.
#pragma once

#include <cstddef>
#include <cstring>

namespace weft::kernels {

// Copies `bytes` bytes, fewer than kLimit (a power of two). dst may overlap src.
template <size_t kLimit>
inline void copyBelow(void* dst, const void* src, size_t bytes) {
  static_assert(kLimit >= 1 && (kLimit & (kLimit - 1)) == 0);
  if constexpr (kLimit >= 4) {
    constexpr size_t n = kLimit / 2;
    if (bytes < n) return copyBelow<n>(dst, src, bytes);
    const auto* s = static_cast<const char*>(src);
    char head[n], tail[n];  // both loaded before either store
    std::memcpy(head, s, n);
    std::memcpy(tail, s + bytes - n, n);
    std::memcpy(dst, head, n);
    std::memcpy(static_cast<char*>(dst) + bytes - n, tail, n);
  } else if constexpr (kLimit == 2) {
    if (bytes == 1) *static_cast<char*>(dst) = *static_cast<const char*>(src);
  }
}

// Any size; inline up to 64 bytes. dst and src must not overlap (as for memcpy).
inline void copySmall(void* dst, const void* src, size_t bytes) {
  if (bytes < 64) return copyBelow<64>(dst, src, bytes);
  std::memcpy(dst, src, bytes);
}

}  // namespace weft::kernels
