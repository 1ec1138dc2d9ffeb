// Opaque C handles for C++ objects. A handle is a number that is never reused, looked up on
// every call, so a destroyed or invented handle is an error instead of a dangling pointer.
//
// Lookups are on every call's path, so each thread remembers the last handle it found: that
// answer holds while no handle has been removed since (removals are counted), which skips the
// mutex and the hash map for a loop of calls on one communicator.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace weft::api {

template <typename State>
class HandleRegistry {
 public:
  explicit HandleRegistry(uintptr_t firstHandle) : next_(firstHandle) {}

  void* add(std::shared_ptr<State> state) {
    std::lock_guard<std::mutex> lock(mutex_);
    uintptr_t handle = next_;
    next_ += 16;
    states_.emplace(handle, std::move(state));
    return reinterpret_cast<void*>(handle);
  }

  std::shared_ptr<State> find(const void* handle) {
    // A thread may look handles up after its thread_locals were destroyed (a destructor that
    // destroys a communicator at thread or process exit): then `last` is not touched again.
    thread_local LastFound last;
    const bool remembering = !LastFound::gone;
    if (remembering && last.registry == this && last.handle == handle &&
        last.removals == removals_.load(std::memory_order_acquire)) {
      if (auto state = last.state.lock()) return state;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = states_.find(reinterpret_cast<uintptr_t>(handle));
    if (it == states_.end()) return nullptr;
    if (remembering) last = {this, handle, removals_.load(std::memory_order_relaxed), it->second};
    return it->second;
  }

  std::shared_ptr<State> remove(const void* handle) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = states_.find(reinterpret_cast<uintptr_t>(handle));
    if (it == states_.end()) return nullptr;
    auto state = std::move(it->second);
    states_.erase(it);
    removals_.fetch_add(1, std::memory_order_release);
    return state;
  }

 private:
  struct LastFound {
    const HandleRegistry* registry = nullptr;
    const void* handle = nullptr;
    uint64_t removals = 0;
    std::weak_ptr<State> state;  // does not keep a destroyed object alive
    ~LastFound() { gone = true; }
    static inline thread_local bool gone = false;  // trivially destructible: readable at thread exit
  };

  std::atomic<uint64_t> removals_{0};
  std::mutex mutex_;
  std::unordered_map<uintptr_t, std::shared_ptr<State>> states_;
  uintptr_t next_;
};

}  // namespace weft::api
