// Logging controlled by WEFT_DEBUG (NONE | WARN | INFO | TRACE, any case; unset: WARN, errors
// and warnings) and WEFT_DEBUG_FILE (%h = host, %p = pid); a bad value of either is warned
// about once, on stderr.
#pragma once

namespace weft {

enum class LogLevel { None = 0, Warn = 1, Info = 2, Trace = 3 };

LogLevel logLevel();
void logMessage(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace weft

#define WEFT_LOG(level, ...)                                                   \
  do {                                                                         \
    if (::weft::logLevel() >= ::weft::LogLevel::level)                         \
      ::weft::logMessage(::weft::LogLevel::level, __VA_ARGS__);                \
  } while (0)
#define WEFT_WARN(...) WEFT_LOG(Warn, __VA_ARGS__)
#define WEFT_INFO(...) WEFT_LOG(Info, __VA_ARGS__)
#define WEFT_TRACE(...) WEFT_LOG(Trace, __VA_ARGS__)
