// A communicator's progress engine: one worker thread that runs the communicator's operations
// in the order they were issued. Asynchronous operations (on a host stream) are queued and the
// caller returns at once; a blocking operation (NULL stream) runs on the caller's thread when
// nothing is queued ahead of it, and otherwise waits its turn, so every rank runs the
// communicator's collectives in issue order whichever way they were called.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "util/status.h"

namespace weft::core {

class ProgressEngine {
 public:
  using Task = std::function<Status()>;

  ProgressEngine() = default;
  ProgressEngine(const ProgressEngine&) = delete;
  ProgressEngine& operator=(const ProgressEngine&) = delete;
  ~ProgressEngine() { shutdown(); }

  // Runs `task` after everything issued before it and returns its status: on this thread
  // when nothing is ahead of it (without copying it anywhere), else on the worker.
  template <typename F>
  Status runBlocking(F&& task) {
    if (enterIfIdle()) {
      Status status = task();
      leave();
      return status;
    }
    return runQueued(Task(std::forward<F>(task)));
  }

  // Queues `task` behind everything issued before it; the worker runs it. The task reports its
  // own outcome (to its stream); the status it returns is dropped.
  Status enqueue(Task task);

  // Lets every queued task run (each is bounded by its own deadline), then stops the worker.
  void shutdown();

  // The CPUs the worker thread runs on (the rank's NUMA node; empty: wherever the OS likes).
  // Applies to a worker started later; CPUs this process may not use are left out.
  void setCpus(std::vector<unsigned> cpus);

 private:
  // Marks the engine busy if nothing is queued or running, and not stopping.
  bool enterIfIdle() {
    uint32_t idle = 0;
    return state_.compare_exchange_strong(idle, kBusy, std::memory_order_acquire, std::memory_order_relaxed);
  }
  // Ends what enterIfIdle (or runQueued) let in.
  void leave() {
    if (state_.fetch_and(~kBusy, std::memory_order_acq_rel) & kContended) notifyChanged();
  }
  void notifyChanged();
  void updateContended();  // with mutex_ held, after queue_ or stopping_ changed
  bool busy() const { return (state_.load(std::memory_order_acquire) & kBusy) != 0; }
  Status runQueued(Task task);
  void workerLoop();
  Status ensureWorker();  // with mutex_ held

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Task> queue_;
  bool stopping_ = false;
  // kBusy: a task is running (on the worker or a blocking caller). kContended: something is
  // queued, or the engine is stopping, so a blocking caller may not run at once, and the end of
  // a task must wake whoever waits on changed_. A blocking call on an idle engine, the common
  // case, is then one compare-and-swap in and one atomic and out, without the mutex; everything
  // else changes state_ with mutex_ held.
  static constexpr uint32_t kBusy = 1, kContended = 2;
  std::atomic<uint32_t> state_{0};
  std::thread worker_;
  std::vector<unsigned> cpus_;
};

}  // namespace weft::core
