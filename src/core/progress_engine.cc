#include "core/progress_engine.h"

#include <pthread.h>
#include <sched.h>

#include <future>
#include <system_error>

namespace weft::core {

void ProgressEngine::notifyChanged() {
  std::lock_guard<std::mutex> lock(mutex_);
  changed_.notify_all();
}

void ProgressEngine::updateContended() {
  if (!queue_.empty() || stopping_) {
    state_.fetch_or(kContended, std::memory_order_acq_rel);
  } else {
    state_.fetch_and(~kContended, std::memory_order_acq_rel);
  }
}

Status ProgressEngine::runQueued(Task task) {
  std::unique_lock<std::mutex> lock(mutex_);
  // A caller that got past the communicator's lookup just before destroy or abort must not
  // run on what shutdown() is about to free.
  if (stopping_) return Status(weftInvalidUsage, "the communicator was destroyed or aborted");
  if (queue_.empty() && enterIfIdle()) {  // the engine went idle since runBlocking looked
    lock.unlock();
    Status status = task();
    leave();
    return status;
  }
  // Something is queued or running: take a place in the queue and wait for the worker. The
  // wait needs no deadline of its own: every task ahead of this one is bounded by its own.
  WEFT_TRY(ensureWorker());
  auto done = std::make_shared<std::promise<Status>>();
  std::future<Status> result = done->get_future();
  queue_.push_back([task = std::move(task), done]() {
    Status status = task();
    done->set_value(status);
    return Status::ok();  // reported to the blocking caller, not as a background failure
  });
  updateContended();
  changed_.notify_all();
  lock.unlock();
  return result.get();
}

Status ProgressEngine::enqueue(Task task) {
  std::lock_guard<std::mutex> lock(mutex_);
  WEFT_TRY(ensureWorker());
  queue_.push_back(std::move(task));
  updateContended();
  changed_.notify_all();
  return Status::ok();
}

void ProgressEngine::setCpus(std::vector<unsigned> cpus) {
  std::lock_guard<std::mutex> lock(mutex_);
  cpus_ = std::move(cpus);
}

Status ProgressEngine::ensureWorker() {
  if (stopping_) return Status(weftInvalidUsage, "the communicator is being destroyed");
  if (worker_.joinable()) return Status::ok();
  try {
    worker_ = std::thread([this] { workerLoop(); });
  } catch (const std::system_error& e) {
    return Status(weftSystemError, std::string("cannot start the progress thread: ") + e.what());
  }
  cpu_set_t allowed, wanted;
  CPU_ZERO(&wanted);
  if (!cpus_.empty() && ::sched_getaffinity(0, sizeof(allowed), &allowed) == 0) {
    for (unsigned c : cpus_) {
      if (c < CPU_SETSIZE && CPU_ISSET(c, &allowed)) CPU_SET(c, &wanted);
    }
    // Best effort: a refusal leaves the thread where the OS put it.
    if (CPU_COUNT(&wanted) > 0) (void)::pthread_setaffinity_np(worker_.native_handle(), sizeof(wanted), &wanted);
  }
  return Status::ok();
}

void ProgressEngine::workerLoop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return !busy() && (!queue_.empty() || stopping_); });
    if (queue_.empty()) return;  // stopping, nothing left
    // kContended is set while the queue holds this task, so no blocking caller can enter now.
    state_.fetch_or(kBusy, std::memory_order_acq_rel);
    Task task = std::move(queue_.front());
    queue_.pop_front();
    updateContended();
    lock.unlock();
    (void)task();
    lock.lock();
    state_.fetch_and(~kBusy, std::memory_order_acq_rel);
    changed_.notify_all();
  }
}

void ProgressEngine::shutdown() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    stopping_ = true;
    updateContended();
    changed_.notify_all();
    if (!worker_.joinable()) {
      // No worker: wait only for a blocking caller that is still running.
      changed_.wait(lock, [&] { return !busy(); });
      return;
    }
  }
  worker_.join();
}

}  // namespace weft::core
