// How the torch backend's operations reach Weft: one at a time on a host stream (CPU tensors) or
// the device lane (CUDA tensors), or, for sends and receives, held back and issued together as
// one Weft group.
#include <c10/util/Exception.h>

#include "device_lane.hpp"
#include "process_group_weft.hpp"
#include "tensor_args.h"

#ifdef WEFT_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>
#endif

namespace weft_torch {

namespace {

// A failed issue's error, for the Works it ends.
std::exception_ptr issueError(weftResult_t rc, weftComm_t comm, const char* what) {
  try {
    check(rc, comm, what);
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

// An operation that could not be issued ends with its error through the completion thread, like
// every other: no future's callback runs in the issuing thread, with issueMutex_ held.
class Failed final : public Completion {
 public:
  explicit Failed(std::exception_ptr error) : error_(std::move(error)) {}
  void await(weftComm_t) override { std::rethrow_exception(error_); }

 private:
  std::exception_ptr error_;
};

}  // namespace

DeviceLane& ProcessGroupWeft::laneFor(const at::Tensor& like) {
#ifdef WEFT_TORCH_CUDA
  const c10::DeviceIndex device = like.device().index();
  if (!lane_) lane_ = std::make_unique<DeviceLane>(store_, getRank(), getSize(), timeout_, device);
  TORCH_CHECK(lane_->device() == device, "weft: this process group runs CUDA tensors on GPU ", lane_->device(),
              ", got one on GPU ", device, " (one GPU per process, as with NCCL)");
  return *lane_;
#else
  (void)like;
  throw std::runtime_error("weft: this build handles CPU tensors only");
#endif
}

c10::intrusive_ptr<c10d::Work> ProcessGroupWeft::submit(c10d::OpType type, const at::Tensor& like,
                                                        std::vector<at::Tensor> outputs, const Issue& issue,
                                                        std::function<void()> finish) {
  std::lock_guard<std::mutex> issuing(issueMutex_);
  issueDeferredLocked();
  weftComm_t comm = comm_;
  std::shared_ptr<Completion> completion;
#ifdef WEFT_TORCH_CUDA
  if (like.defined() && like.is_cuda()) {
    DeviceLane& lane = laneFor(like);
    lane.waitFor(*lane.markCurrent());
    comm = lane.comm();
    const weftResult_t rc = issue(comm, lane.stream().stream());
    if (rc != weftSuccess) {
      lane.park(std::move(finish));  // Weft may have queued part of it, on these tensors
      check(rc, comm, "issuing the collective");
    }
    completion = lane.end(std::move(finish));  // the copies back follow on the lane
    finish = nullptr;
  }
#endif
  if (!completion) {
    auto stream = std::make_shared<HostStream>();
    check(weftStreamCreate(&stream->stream), comm, "weftStreamCreate");
    check(issue(comm, stream->stream), comm, "issuing the collective");
    completion = std::move(stream);
  }
  auto work = c10::make_intrusive<WeftWork>(getRank(), type, comm, std::move(completion), std::move(outputs),
                                            std::move(finish), timeout_, futurer_.get_id());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_.push_back(work);
  }
  changed_.notify_one();
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupWeft::defer(c10d::OpType type, const at::Tensor& like,
                                                       std::vector<at::Tensor> outputs, Issue issue,
                                                       std::function<void()> finish) {
  auto work = c10::make_intrusive<WeftWork>(getRank(), type, comm_, nullptr, std::move(outputs), nullptr, timeout_,
                                            futurer_.get_id(), [this] {
                                              std::lock_guard<std::mutex> lock(issueMutex_);
                                              issueDeferredLocked();
                                            });
  std::lock_guard<std::mutex> lock(issueMutex_);
  const bool onDevice = like.is_cuda();
  // Every rank of the group makes the device lane together, so a send or receive (between two
  // of them) cannot be what makes it.
  TORCH_CHECK(!onDevice || lane_ != nullptr, "weft: the first operation on CUDA tensors in a process group must be "
              "a collective (every rank sets up the GPU communicator in it), not a send or receive");
  std::shared_ptr<StreamMark> ready;
#ifdef WEFT_TORCH_CUDA
  // Issued later, maybe by another thread: the lane must wait for the stream current now.
  if (onDevice) ready = laneFor(like).markCurrent();
#endif
  deferred_.push_back(Deferred{work, std::move(issue), std::move(finish), std::move(ready)});
  return work;
}

// Issues the held-back operations of one kind (host or device) as one Weft group.
void ProcessGroupWeft::issueDeferredBatch(std::vector<Deferred> batch, bool onDevice) {
  if (batch.empty()) return;
  weftComm_t comm = comm_;
  std::vector<std::pair<std::shared_ptr<Completion>, std::function<void()>>> ends;
  weftResult_t rc = weftSuccess;
  auto issueGroup = [&](weftStream_t stream) {
    rc = weftGroupStart();
    for (auto& entry : batch) {
      weftResult_t one = entry.issue(comm, stream);  // Weft calls only: nothing here throws
      if (rc == weftSuccess) rc = one;
    }
    weftResult_t end = weftGroupEnd();
    if (rc == weftSuccess) rc = end;
  };
  std::exception_ptr error;
#ifdef WEFT_TORCH_CUDA
  if (onDevice) {
    comm = lane_->comm();
    try {
      for (const auto& entry : batch) lane_->waitFor(*entry.ready);
      issueGroup(lane_->stream().stream());
    } catch (...) {
      error = std::current_exception();
    }
    for (auto& entry : batch) {
      if (error || rc != weftSuccess) {
        lane_->park(std::move(entry.finish));  // Weft may have queued part of the group
      } else {
        ends.emplace_back(lane_->end(std::move(entry.finish)), nullptr);
      }
    }
  }
#endif
  if (!onDevice) {
    auto stream = std::make_shared<HostStream>();
    rc = weftStreamCreate(&stream->stream);
    if (rc == weftSuccess) issueGroup(stream->stream);
    for (auto& entry : batch) ends.emplace_back(stream, std::move(entry.finish));
  }
  if (!error && rc != weftSuccess) error = issueError(rc, comm, "issuing sends and receives");
  if (error) ends.assign(batch.size(), {std::make_shared<Failed>(error), nullptr});
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t i = 0; i < batch.size(); ++i) {
      batch[i].work->issued(comm, std::move(ends[i].first), std::move(ends[i].second));
      pending_.push_back(batch[i].work);
    }
  }
  changed_.notify_one();
}

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
c10::intrusive_ptr<c10d::Work> ProcessGroupWeft::endCoalescing() {
  std::lock_guard<std::mutex> issuing(issueMutex_);
  // The completion thread finishes Works in issue order: the host ones, then the device ones.
  c10::intrusive_ptr<WeftWork> last;
  bool lastOnDevice = false;
  for (const auto& entry : deferred_) {
    const bool onDevice = entry.ready != nullptr;
    if (onDevice || !lastOnDevice) {
      last = entry.work;
      lastOnDevice = onDevice;
    }
  }
  issueDeferredLocked();
  if (last) return last;
  // Nothing held back: a Work that is done at once.
  struct Done final : Completion {
    void await(weftComm_t) override {}
  };
  auto work = c10::make_intrusive<WeftWork>(getRank(), c10d::OpType::COALESCED, comm_, std::make_shared<Done>(),
                                            std::vector<at::Tensor>{}, nullptr, timeout_, futurer_.get_id());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_.push_back(work);
  }
  changed_.notify_one();
  return work;
}
#endif

void ProcessGroupWeft::issueDeferredLocked() {
  if (deferred_.empty()) return;
  std::vector<Deferred> host, device;
  for (auto& entry : deferred_) (entry.ready ? device : host).push_back(std::move(entry));
  deferred_.clear();
  issueDeferredBatch(std::move(host), false);
  issueDeferredBatch(std::move(device), true);
}

}  // namespace weft_torch
