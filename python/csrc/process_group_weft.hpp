// The "weft" torch.distributed backend: a c10d process group (torch 1.x: c10d::ProcessGroup;
// torch 2.x: c10d::Backend) whose collectives are Weft's, issued on a Weft host stream so that
// every call returns a Work at once and completes in the background.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/version.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

#include "weft/weft.h"

namespace weft_torch {

// The longest any wait here lasts: steady_clock counts in nanoseconds, which a timedelta of
// centuries (a process group's timeout may be anything) would overflow.
constexpr std::chrono::milliseconds kLongestWait = std::chrono::hours(24 * 365);

#if TORCH_VERSION_MAJOR >= 2
using BackendBase = c10d::Backend;
#else
using BackendBase = c10d::ProcessGroup;
#endif

// What an issued operation is waiting on: await() returns once it is done, or throws its error.
class Completion {
 public:
  virtual ~Completion() = default;
  // comm: the operation's communicator, whose last-error text an error carries.
  virtual void await(weftComm_t comm) = 0;
};

// A Weft host stream (CPU tensors), destroyed when the last operation issued on it is done with it.
struct HostStream final : Completion {
  weftStream_t stream = nullptr;
  HostStream() = default;
  HostStream(const HostStream&) = delete;
  HostStream& operator=(const HostStream&) = delete;
  ~HostStream() override;
  void await(weftComm_t comm) override;
};

class DeviceLane;  // CUDA tensors (device_lane.hpp), in a build against a torch with CUDA
struct StreamMark;

// One operation: done when its Completion says so; then `finish` copies results into the
// caller's tensors (for CUDA tensors it ran, in stream order, when the operation was issued) and
// the future completes with them.
class WeftWork : public c10d::Work {
 public:
  // A null completion: the operation is not issued yet (a send or receive held back to be issued
  // with its neighbours); `issueDeferred` issues it, and whatever waits on it calls that first.
  // futureThread: the process group's thread that completes futures (and runs their then()
  // callbacks); a wait() there does not wait for futures, which that thread completes later.
  WeftWork(int rank, c10d::OpType type, weftComm_t comm, std::shared_ptr<Completion> completion,
           std::vector<at::Tensor> outputs, std::function<void()> finish, std::chrono::milliseconds timeout,
           std::thread::id futureThread, std::function<void()> issueDeferred = {});
  ~WeftWork() override = default;

  bool isCompleted() override;
  bool isSuccess() const override;
  bool wait(std::chrono::milliseconds timeout) override;
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  // The deferred operation was issued on `comm`; it completes with `completion`, then runs `finish`.
  void issued(weftComm_t comm, std::shared_ptr<Completion> completion, std::function<void()> finish);
  // Called by the process group's completion thread, in issue order: the Work is done.
  void complete();
  // Then, on the process group's future thread: the future completes with the same outcome.
  void completeFuture();

 private:
  void issueIfDeferred();

  weftComm_t comm_;
  std::shared_ptr<Completion> completion_;
  std::function<void()> issueDeferred_;  // set while deferred; guarded by deferredMutex_
  std::mutex deferredMutex_;
  std::vector<at::Tensor> outputs_;
  std::function<void()> finish_;
  std::chrono::milliseconds timeout_;
  std::thread::id futureThread_;
  std::exception_ptr error_;  // set by complete()
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// A Weft communicator over the group behind `store`: rank 0 makes a unique id and publishes it
// there under `key`, the others read it. `timeout` becomes the communicator's deadline.
weftComm_t initCommThroughStore(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                std::chrono::milliseconds timeout, const std::string& key);

class ProcessGroupWeft : public BackendBase {
 public:
  // Collective over the group: rank 0 makes a Weft unique id and publishes it in `store`.
  ProcessGroupWeft(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                   std::chrono::milliseconds timeout);
  ~ProcessGroupWeft() override;

  const std::string getBackendName() const override { return "weft"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplits, std::vector<int64_t>& inputSplits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
  // torch's coalescing manager (batch_isend_irecv on CUDA tensors in torch 2.1-2.4, for one):
  // sends and receives are held back and issued as one group anyway, so these only mark the
  // batch; the Work of endCoalescing() is done when all of it is.
  void startCoalescing() override {}
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
#endif

  // What torch.distributed calls to make one (Backend.register_backend's creator).
  static c10::intrusive_ptr<BackendBase> create(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                const std::chrono::duration<float>& timeout);

 private:
  // The Weft calls of one operation, on the communicator and stream they are given.
  using Issue = std::function<weftResult_t(weftComm_t, weftStream_t)>;

  // Issues `issue` and returns its Work. `like`, a tensor of the operation, says where it runs:
  // CPU tensors on a fresh Weft host stream of comm_, with `finish` (copying results out of
  // staging tensors) once it completed; CUDA tensors on the device lane (device_lane.hpp).
  c10::intrusive_ptr<c10d::Work> submit(c10d::OpType type, const at::Tensor& like, std::vector<at::Tensor> outputs,
                                        const Issue& issue, std::function<void()> finish = {});
  void completionLoop();
  // Sends and receives are held back and issued together, as one Weft group, when anything
  // waits on one of them or another operation is issued: issued one by one, two ranks that
  // both send first (isend then irecv, or batch_isend_irecv) would each wait for the other's
  // receive. Other operations issue what is held first, so every rank keeps one order.
  c10::intrusive_ptr<c10d::Work> defer(c10d::OpType type, const at::Tensor& like, std::vector<at::Tensor> outputs,
                                       Issue issue, std::function<void()> finish);
  void issueDeferredLocked();  // issueMutex_ held
  // The lane for CUDA tensor `like` (made by the first CUDA operation); issueMutex_ held.
  DeviceLane& laneFor(const at::Tensor& like);

  weftComm_t comm_ = nullptr;
  c10::intrusive_ptr<c10d::Store> store_;  // for the device lane's unique id
  std::unique_ptr<DeviceLane> lane_;
  std::mutex issueMutex_;  // operations reach Weft in one order
  struct Deferred {
    c10::intrusive_ptr<WeftWork> work;
    Issue issue;
    std::function<void()> finish;
    std::shared_ptr<StreamMark> ready;  // CUDA tensors: the caller's stream when it was called
  };
  std::vector<Deferred> deferred_;
  void issueDeferredBatch(std::vector<Deferred> batch, bool onDevice);  // issueMutex_ held
  std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<c10::intrusive_ptr<WeftWork>> pending_;
  bool stopping_ = false;
  std::thread completer_;
  // Futures complete on a thread of their own, after their Work: a then() callback that runs
  // another collective and waits for it (as DDP comm hooks may) needs the completion thread
  // free to finish that one. A callback may also drop the last reference to this group, which
  // is then destroyed on that thread: so the thread's queue is shared with it, not a member,
  // and the thread outlives the group (detached) to finish what is queued.
  struct FutureQueue {
    std::mutex mutex;
    std::condition_variable changed;
    std::deque<c10::intrusive_ptr<WeftWork>> works;
    bool stopping = false;
  };
  static void futureLoop(const std::shared_ptr<FutureQueue>& queue);
  std::shared_ptr<FutureQueue> futureQueue_ = std::make_shared<FutureQueue>();
  std::thread futurer_;
};

}  // namespace weft_torch
