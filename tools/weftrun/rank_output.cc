// Forwarding the ranks' output: each rank's stdout and stderr arrive on pipes, and go out
// line by line with a "[rank]: " prefix, so lines of different ranks never interleave. They
// (and the launcher's own messages) wait in an OutputSink until the reader takes them.
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
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

// A POLLOUT entry for each sink with output queued.
void Job::add_sink_fds(std::vector<pollfd>& fds) const {
  for (const OutputSink* sink : {&out_sink_, &err_sink_}) {
    if (sink->pending()) fds.push_back({sink->fd(), POLLOUT, 0});
  }
}

// Writes what is still queued once the job is over, as long as the reader takes it, but no
// longer than --timeout allows; after a forwarded signal only what the reader takes at once.
// A signal arriving now ends the wait and is the launcher's death, as during the job.
void Job::drain_output() {
  while (out_sink_.pending() || err_sink_.pending()) {
    int timeout_ms = -1;
    if (forwarded_signal_ != 0) {
      timeout_ms = 0;
    } else if (job_deadline_ms_ > 0) {
      timeout_ms = static_cast<int>(std::clamp<int64_t>(job_deadline_ms_ - now_ms(), 0, INT_MAX));
    }
    std::vector<pollfd> fds{{signal_fd_, POLLIN, 0}};
    add_sink_fds(fds);
    const int ready = poll(fds.data(), fds.size(), timeout_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0 && forwarded_signal_ == 0) {  // --timeout: the job is a failure if output is lost
      if (!exit_status_) exit_status_ = kExitTimeout;
      say("weftrun: timeout after %g s: output not taken by its reader is dropped\n", options_.timeout_seconds);
      pollfd err{err_sink_.fd(), POLLOUT, 0};
      if (poll(&err, 1, 0) == 1) err_sink_.write_some();
    }
    if (ready <= 0) return;
    write_output(fds);
    if (fds[0].revents == 0) continue;
    signalfd_siginfo info;
    while (read(signal_fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
      const int sig = static_cast<int>(info.ssi_signo);
      if (sig != SIGCHLD && forwarded_signal_ == 0) {
        forwarded_signal_ = sig;
        exit_status_ = 128 + sig;
      }
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
  std::string prefix = "[" + std::to_string(rank.global) + "]: ";
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
    std::string line = "[" + std::to_string(rank.global) + "]: " + stream.partial_line + "\n";
    stream.sink->append(line);
    stream.partial_line.clear();
  }
}

}  // namespace weftrun
