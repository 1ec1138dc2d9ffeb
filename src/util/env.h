// Reading configuration from the environment, with validation.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "util/status.h"

namespace weft {

std::optional<std::string> envString(const char* name);
// The variable as an integer within [min, max]; a malformed value is an error naming it.
Result<std::optional<int64_t>> envInt(const char* name, int64_t min, int64_t max);
// Parses "123", "4K", "8M", "1G" (powers of 1024).
std::optional<uint64_t> parseByteSize(const std::string& text);
// The variable as a size (parseByteSize) within [min, max]; a malformed value is an error naming it.
Result<std::optional<uint64_t>> envByteSize(const char* name, uint64_t min, uint64_t max);

// WEFT_TIMEOUT_MS or 300000 (five minutes).
Result<int> defaultTimeoutMs();

}  // namespace weft
