// Forwarding the ranks' output: each rank's stdout and stderr arrive on pipes, and go out
// line by line with a "[rank]: " prefix, so lines of different ranks never interleave. They
// (and the launcher's own messages) wait in an OutputSink until the reader takes them.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <string>

#include "job.h"

namespace weftrun {
namespace {

constexpr size_t kMaxLineBytes = 64 * 1024;  // longer lines are forwarded in pieces

}  // namespace

void Job::say(const char* format, ...) {
  va_list args, again;
  va_start(args, format);
  va_copy(again, args);
  const int length = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  std::string text(static_cast<size_t>(std::max(length, 0)) + 1, '\0');
  std::vsnprintf(text.data(), text.size(), format, again);
  va_end(again);
  text.pop_back();
  err_sink_.append(text);
}

// Writes to each sink that poll found writable (`fds` as the event loop built them).
void Job::write_output(const std::vector<pollfd>& fds) {
  for (const pollfd& p : fds) {
    for (OutputSink* sink : {&out_sink_, &err_sink_}) {
      if (p.fd == sink->fd() && (p.events & POLLOUT) != 0 && p.revents != 0) sink->write_some();
    }
  }
}

void Job::read_stream(Rank& rank, OutputStream& stream, int max_reads) {
  char buffer[65536];
  for (int i = 0; i < max_reads && stream.fd >= 0; ++i) {
    ssize_t n = read(stream.fd, buffer, sizeof buffer);
    if (n > 0) {
      forward_output(rank, stream, std::string_view(buffer, static_cast<size_t>(n)));
    } else if (n < 0 && errno == EINTR) {
      --i;
    } else if (n < 0 && errno == EAGAIN) {
      return;
    } else {
      close_stream(rank, stream);
    }
  }
}

void Job::forward_output(const Rank& rank, OutputStream& stream, std::string_view data) {
  std::string prefix = "[" + std::to_string(rank.index) + "]: ";
  std::string& pending = stream.partial_line;
  pending.append(data);
  std::string out;
  size_t start = 0;
  for (size_t newline; (newline = pending.find('\n', start)) != std::string::npos;
       start = newline + 1) {
    out += prefix;
    out.append(pending, start, newline + 1 - start);
  }
  pending.erase(0, start);
  if (pending.size() >= kMaxLineBytes) {
    out += prefix + pending + "\n";
    pending.clear();
  }
  stream.sink->append(out);
  if (stream.sink->broken()) {
    // Our reader is gone: close the rank's pipe too, so its next write fails the same way.
    pending.clear();
    close_stream(rank, stream);
  }
}

// Closes the pipe and forwards an unterminated last line, adding the newline.
void Job::close_stream(const Rank& rank, OutputStream& stream) {
  if (stream.fd < 0) return;
  close(stream.fd);
  stream.fd = -1;
  if (!stream.partial_line.empty()) {
    std::string line = "[" + std::to_string(rank.index) + "]: " + stream.partial_line + "\n";
    stream.sink->append(line);
    stream.partial_line.clear();
  }
}

}  // namespace weftrun
