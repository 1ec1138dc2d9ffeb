// WeftWork: one operation of the torch backend, done when its Completion says so.
#include "process_group_weft.hpp"

#include <algorithm>

#include "tensor_args.h"

namespace weft_torch {

HostStream::~HostStream() {
  if (stream != nullptr) weftStreamDestroy(stream);
}

void HostStream::await(weftComm_t comm) { check(weftStreamSynchronize(stream), comm, "collective"); }

WeftWork::WeftWork(int rank, c10d::OpType type, weftComm_t comm, std::shared_ptr<Completion> completion,
                   std::vector<at::Tensor> outputs, std::function<void()> finish, std::chrono::milliseconds timeout,
                   std::thread::id futureThread, std::function<void()> issueDeferred)
    : c10d::Work(rank, type),
      comm_(comm),
      completion_(std::move(completion)),
      issueDeferred_(std::move(issueDeferred)),
      outputs_(std::move(outputs)),
      finish_(std::move(finish)),
      timeout_(timeout),
      futureThread_(futureThread),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

void WeftWork::issueIfDeferred() {
  std::function<void()> issue;
  {
    std::lock_guard<std::mutex> lock(deferredMutex_);
    issue = issueDeferred_;
  }
  if (issue) issue();  // the process group issues every held-back operation, this one included
}

void WeftWork::issued(weftComm_t comm, std::shared_ptr<Completion> completion, std::function<void()> finish) {
  std::lock_guard<std::mutex> lock(deferredMutex_);
  comm_ = comm;
  completion_ = std::move(completion);
  finish_ = std::move(finish);
  issueDeferred_ = nullptr;
}

c10::intrusive_ptr<c10::ivalue::Future> WeftWork::getFuture() {
  issueIfDeferred();
  return future_;
}

void WeftWork::complete() {
  std::exception_ptr error;
  try {
    completion_->await(comm_);
    // Copying results back into a view of a tensor that requires grad is not autograd's
    // business (it is not, on the caller's thread, for gloo); this thread's grad mode is on.
    at::NoGradGuard noGrad;
    if (finish_) finish_();
  } catch (...) {
    error = std::current_exception();
  }
  completion_.reset();
  finish_ = nullptr;  // nor the tensors it holds
  error_ = error;
  finish(error);
}

void WeftWork::completeFuture() {
  if (error_) {
    future_->setError(error_);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
}

bool WeftWork::isCompleted() {
  issueIfDeferred();  // a caller polling this must not poll forever
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_;
}

bool WeftWork::isSuccess() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_ && !exception_;
}

bool WeftWork::wait(std::chrono::milliseconds timeout) {
  issueIfDeferred();
  std::unique_lock<std::mutex> lock(mutex_);
  // A timeout given here is kept (as gloo keeps it). Without one, Weft's own deadline (the
  // process group's timeout) ends every operation, and this wait only has to outlast it.
  const auto limit = timeout == kNoTimeout ? std::min(timeout_, kLongestWait) * 2 + std::chrono::seconds(1)
                                           : std::min(timeout, kLongestWait);
  if (!cv_.wait_for(lock, limit, [&] { return completed_; })) {
    throw std::runtime_error("weft: operation timed out after " +
                             std::to_string((timeout == kNoTimeout ? timeout_ : timeout).count()) + " ms");
  }
  std::exception_ptr error = exception_;
  lock.unlock();
  // After wait(), get_future() has its value too; except on the future thread itself, which
  // completes this future only after the callback it is running now.
  if (std::this_thread::get_id() != futureThread_) future_->wait();
  if (error) std::rethrow_exception(error);
  return true;
}

}  // namespace weft_torch
