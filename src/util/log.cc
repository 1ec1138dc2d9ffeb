#include "util/log.h"

#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

namespace weft {
namespace {

struct LogSink {
  LogLevel level = LogLevel::Warn;
  FILE* file = stderr;
  char host[64] = {};
};

std::string expandLogPath(const char* pattern, const char* host) {
  std::string out;
  for (const char* p = pattern; *p; ++p) {
    if (p[0] == '%' && p[1] == 'h') {
      out += host;
      ++p;
    } else if (p[0] == '%' && p[1] == 'p') {
      out += std::to_string(getpid());
      ++p;
    } else {
      out += *p;
    }
  }
  return out;
}

// A WARN line written while the sink is being made (logMessage would wait for it).
void warnAtStart(const LogSink& s, const std::string& text) {
  std::fprintf(s.file, "%s:%d:%ld WEFT WARN %s\n", s.host, getpid(), static_cast<long>(syscall(SYS_gettid)),
               text.c_str());
}

LogSink& sink() {
  static LogSink instance = [] {
    LogSink s;
    gethostname(s.host, sizeof(s.host) - 1);
    if (char* dot = std::strchr(s.host, '.')) *dot = '\0';
    const char* level = std::getenv("WEFT_DEBUG");
    bool unknownLevel = false;
    if (level != nullptr && *level != '\0') {
      if (strcasecmp(level, "NONE") == 0) s.level = LogLevel::None;
      else if (strcasecmp(level, "WARN") == 0) s.level = LogLevel::Warn;
      else if (strcasecmp(level, "INFO") == 0) s.level = LogLevel::Info;
      else if (strcasecmp(level, "TRACE") == 0) s.level = LogLevel::Trace;
      else unknownLevel = true;
    }
    int fileError = 0;
    const char* path = std::getenv("WEFT_DEBUG_FILE");
    if (path != nullptr && *path != '\0' && s.level != LogLevel::None) {
      if (FILE* f = std::fopen(expandLogPath(path, s.host).c_str(), "a")) s.file = f;
      else fileError = errno;
    }
    if (unknownLevel) {
      warnAtStart(s, std::string("WEFT_DEBUG=\"") + level + "\" is not NONE, WARN, INFO or TRACE: logging at WARN");
    }
    if (fileError != 0) {
      warnAtStart(s, std::string("WEFT_DEBUG_FILE=\"") + path + "\" cannot be opened (" + std::strerror(fileError) +
                         "): logging to stderr");
    }
    return s;
  }();
  return instance;
}

const char* levelName(LogLevel level) {
  switch (level) {
    case LogLevel::Warn: return "WARN";
    case LogLevel::Info: return "INFO";
    case LogLevel::Trace: return "TRACE";
    default: return "";
  }
}

}  // namespace

LogLevel logLevel() { return sink().level; }

void logMessage(LogLevel level, const char* fmt, ...) {
  LogSink& s = sink();
  char text[1024];
  va_list args;
  va_start(args, fmt);
  const int written = std::vsnprintf(text, sizeof(text), fmt, args);
  va_end(args);
  // A multi-line message (the plan) ends in a newline of its own: one is added below.
  size_t length = written < 0 ? 0 : std::min(static_cast<size_t>(written), sizeof(text) - 1);
  while (length > 0 && text[length - 1] == '\n') text[--length] = '\0';
  static auto* mutex = new std::mutex;  // never destroyed: threads may log while the process exits
  std::lock_guard<std::mutex> lock(*mutex);
  std::fprintf(s.file, "%s:%d:%ld WEFT %s %s\n", s.host, getpid(),
               static_cast<long>(syscall(SYS_gettid)), levelName(level), text);
  std::fflush(s.file);
}

}  // namespace weft
