#include "output_sink.h"

#include <limits.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace weftrun {
namespace {

constexpr size_t kMaxBytesPerCall = 16 * PIPE_BUF;  // then back to the event loop

bool writable_now(int fd) {
  pollfd p{fd, POLLOUT, 0};
  return poll(&p, 1, 0) == 1 && (p.revents & POLLOUT) != 0;
}

}  // namespace

void OutputSink::append(std::string_view text) {
  if (broken_) return;
  if (head_ == queued_.size()) {
    queued_.clear();
    head_ = 0;
  }
  queued_.append(text);
}

// POLLOUT on a pipe means room for at least PIPE_BUF bytes, so a write of no more than that
// does not block even on a blocking descriptor (the launcher must not make the descriptor it
// shares with its parent non-blocking). Files, terminals and sockets that poll as writable
// take such a write at once too.
void OutputSink::write_some() {
  size_t budget = kMaxBytesPerCall;
  while (pending() && budget > 0) {
    const size_t n = std::min({queued_.size() - head_, size_t{PIPE_BUF}, budget});
    const ssize_t written = write(fd_, queued_.data() + head_, n);
    if (written < 0 && errno == EINTR) continue;
    if (written < 0 && errno == EAGAIN) break;
    if (written <= 0) {
      // EPIPE: the reader is gone. Any other error (a full disk, say) loses what is queued,
      // as a direct write would have, and forwarding goes on.
      broken_ = written < 0 && errno == EPIPE;
      queued_.clear();
      head_ = 0;
      return;
    }
    head_ += static_cast<size_t>(written);
    budget -= std::min(budget, static_cast<size_t>(written));
    if (pending() && !writable_now(fd_)) break;
  }
  if (!pending()) {
    queued_.clear();
    head_ = 0;
  } else if (head_ >= kHighWater) {
    queued_.erase(0, head_);
    head_ = 0;
  }
}

}  // namespace weftrun
