// Opaque C handles for C++ objects. A handle is a number that is never reused, looked up on
// every call, so a destroyed or invented handle is an error instead of a dangling pointer.
#pragma once

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
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = states_.find(reinterpret_cast<uintptr_t>(handle));
    return it == states_.end() ? nullptr : it->second;
  }

  std::shared_ptr<State> remove(const void* handle) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = states_.find(reinterpret_cast<uintptr_t>(handle));
    if (it == states_.end()) return nullptr;
    auto state = std::move(it->second);
    states_.erase(it);
    return state;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<uintptr_t, std::shared_ptr<State>> states_;
  uintptr_t next_;
};

}  // namespace weft::api
