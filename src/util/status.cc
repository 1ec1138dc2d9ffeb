#include "util/status.h"

#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace weft {

const std::string& Status::noMessage() {
  static const auto* empty = new std::string();  // never destroyed: statuses outlive statics
  return *empty;
}

std::string formatString(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  va_list copy;
  va_copy(copy, args);
  int needed = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  std::string out;
  if (needed > 0) {
    out.resize(static_cast<size_t>(needed) + 1);
    std::vsnprintf(out.data(), out.size(), fmt, args);
    out.resize(static_cast<size_t>(needed));
  }
  va_end(args);
  return out;
}

std::string errnoString(int err) {
  char buf[256];
  // GNU strerror_r may return a static string instead of filling buf.
  const char* text = strerror_r(err, buf, sizeof(buf));
  return text;
}

}  // namespace weft
