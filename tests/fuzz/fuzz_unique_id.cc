// Fuzz target: decoding a weftUniqueId, the 128 bytes a user ships between processes and any
// of them may have mangled. Accepted ids re-encode to the same contents.
#include <cstdint>
#include <cstring>

#include "core/unique_id.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  weftUniqueId id{};
  std::memcpy(&id, data, size < sizeof(id) ? size : sizeof(id));
  auto decoded = weft::core::decodeUniqueId(id);
  if (decoded.isOk()) {
    weftUniqueId again{};
    weft::core::encodeUniqueId(decoded.value(), &again);
    auto twice = weft::core::decodeUniqueId(again);
    if (!twice.isOk() || twice.value().secret != decoded.value().secret) __builtin_trap();
  }
  return 0;
}
