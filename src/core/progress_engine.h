// A communicator's progress engine: one worker thread that runs the communicator's operations
// in the order they were issued. Asynchronous operations (on a host stream) are queued and the
// caller returns at once; a blocking operation (NULL stream) runs on the caller's thread when
// nothing is queued ahead of it, and otherwise waits its turn, so every rank runs the
// communicator's collectives in issue order whichever way they were called.
#pragma once

#include <condition_variable>
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
  bool enterIfIdle();  // marks the engine busy if nothing is queued or running
  void leave();        // ends what enterIfIdle let in
  Status runQueued(Task task);
  void workerLoop();
  Status ensureWorker();  // with mutex_ held

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Task> queue_;
  bool busy_ = false;  // a task is running (on the worker or a blocking caller)
  bool stopping_ = false;
  std::thread worker_;
  std::vector<unsigned> cpus_;
};

}  // namespace weft::core
