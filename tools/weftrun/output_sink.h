// Where the launcher's output goes (its stdout or stderr): the ranks' forwarded lines and its
// own messages wait here and are written only when poll says the descriptor takes more. A
// reader that stops reading (a pager left alone, a stuck log collector) then never blocks the
// launcher in write(): it goes on forwarding signals and keeping --timeout. Past kHighWater
// the launcher stops reading the ranks' pipes, so a stalled reader stalls the ranks' output
// rather than growing the launcher's memory.
#ifndef WEFT_TOOLS_WEFTRUN_OUTPUT_SINK_H_
#define WEFT_TOOLS_WEFTRUN_OUTPUT_SINK_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace weftrun {

class OutputSink {
 public:
  explicit OutputSink(int fd) : fd_(fd) {}
  OutputSink(const OutputSink&) = delete;
  OutputSink& operator=(const OutputSink&) = delete;

  int fd() const { return fd_; }
  // Queues `text` (whole lines, so that lines of different ranks never interleave); dropped
  // once the reader is gone.
  void append(std::string_view text);
  bool pending() const { return head_ < queued_.size(); }
  bool full() const { return queued_.size() - head_ >= kHighWater; }
  // The reader closed its end (EPIPE): nothing more is written, and the ranks' pipes to this
  // sink are closed so that their next write fails the same way.
  bool broken() const { return broken_; }
  // Writes what the descriptor takes without waiting; call it when poll reports POLLOUT.
  void write_some();

 private:
  static constexpr size_t kHighWater = 1 << 20;

  int fd_;
  std::string queued_;
  size_t head_ = 0;  // queued_[head_..] is still to be written
  bool broken_ = false;
};

}  // namespace weftrun

#endif  // WEFT_TOOLS_WEFTRUN_OUTPUT_SINK_H_
