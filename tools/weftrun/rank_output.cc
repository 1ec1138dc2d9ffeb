// Forwarding the ranks' output: each rank's stdout and stderr arrive on pipes, and go out
// line by line with a "[rank]: " prefix, so lines of different ranks never interleave.
#include <unistd.h>

#include <cerrno>

#include "job.h"

namespace weftrun {
namespace {

constexpr size_t kMaxLineBytes = 64 * 1024;  // longer lines are forwarded in pieces

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t written = write(fd, data.data(), data.size());
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return false;
    data.remove_prefix(static_cast<size_t>(written));
  }
  return true;
}

}  // namespace

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
  if (!write_all(stream.target_fd, out) && errno == EPIPE) {
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
    write_all(stream.target_fd, line);
    stream.partial_line.clear();
  }
}

}  // namespace weftrun
