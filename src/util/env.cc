#include "util/env.h"

#include <cerrno>
#include <charconv>
#include <cstdlib>

namespace weft {

std::optional<std::string> envString(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

Result<std::optional<int64_t>> envInt(const char* name, int64_t min, int64_t max) {
  auto text = envString(name);
  if (!text) return std::optional<int64_t>();
  // from_chars, unlike strtoll, takes no leading space or plus sign, as parseByteSize does not.
  int64_t value = 0;
  const char* last = text->data() + text->size();
  const auto [stop, error] = std::from_chars(text->data(), last, value);
  if (error != std::errc() || stop != last || value < min || value > max) {
    return Status(weftInvalidArgument,
                  formatString("environment variable %s=\"%s\" is not an integer in [%lld, %lld]",
                               name, text->c_str(), static_cast<long long>(min),
                               static_cast<long long>(max)));
  }
  return std::optional<int64_t>(value);
}

std::optional<uint64_t> parseByteSize(const std::string& text) {
  // Digits first: strtoull would skip spaces and take a sign ("-1" as 2^64 - 1).
  if (text.empty() || text[0] < '0' || text[0] > '9') return std::nullopt;
  errno = 0;
  char* end = nullptr;
  unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  if (errno != 0) return std::nullopt;
  uint64_t scale = 1;
  if (*end != '\0') {
    switch (*end) {
      case 'k': case 'K': scale = 1ull << 10; break;
      case 'm': case 'M': scale = 1ull << 20; break;
      case 'g': case 'G': scale = 1ull << 30; break;
      default: return std::nullopt;
    }
    if (end[1] != '\0') return std::nullopt;
  }
  if (value > UINT64_MAX / scale) return std::nullopt;
  return value * scale;
}

Result<std::optional<uint64_t>> envByteSize(const char* name, uint64_t min, uint64_t max) {
  auto text = envString(name);
  if (!text) return std::optional<uint64_t>();
  auto bytes = parseByteSize(*text);
  if (!bytes || *bytes < min || *bytes > max) {
    return Status(weftInvalidArgument,
                  formatString("environment variable %s=\"%s\" is not a size (such as 4096, 64K, 256M) from "
                               "%llu to %llu bytes",
                               name, text->c_str(), static_cast<unsigned long long>(min),
                               static_cast<unsigned long long>(max)));
  }
  return std::optional<uint64_t>(*bytes);
}

Result<int> defaultTimeoutMs() {
  auto value = envInt("WEFT_TIMEOUT_MS", 1, INT32_MAX);
  if (!value.isOk()) return value.status();
  return value.value() ? static_cast<int>(*value.value()) : 300000;
}

}  // namespace weft
