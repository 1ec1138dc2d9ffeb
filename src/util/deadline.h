// A point in time by which a blocking wait must end. Every wait in Weft takes one.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace weft {

class Deadline {
 public:
  using Clock = std::chrono::steady_clock;

  static Deadline afterMs(int64_t ms) { return Deadline(Clock::now() + std::chrono::milliseconds(ms)); }
  static Deadline never() { return Deadline(Clock::time_point::max()); }

  bool expired() const { return Clock::now() >= at_; }

  // Milliseconds left, clamped to [0, cap]; suitable for poll().
  int remainingMs(int cap = 1 << 30) const {
    if (at_ == Clock::time_point::max()) return cap;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at_ - Clock::now()).count();
    return static_cast<int>(std::clamp<int64_t>(left + 1, 0, cap));
  }

  Deadline earlier(const Deadline& other) const { return at_ < other.at_ ? *this : other; }

 private:
  explicit Deadline(Clock::time_point at) : at_(at) {}
  Clock::time_point at_;
};

}  // namespace weft
