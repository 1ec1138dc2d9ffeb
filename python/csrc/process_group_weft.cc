#include "process_group_weft.hpp"

#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <stdexcept>

#include "device_lane.hpp"
#include "shared_cpu_allocator.hpp"
#include "tensor_args.h"

namespace weft_torch {

weftComm_t initCommThroughStore(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                std::chrono::milliseconds timeout, const std::string& key) {
  weftUniqueId id;
  if (rank == 0) {
    check(weftGetUniqueId(&id), nullptr, "weftGetUniqueId");
    const auto* bytes = reinterpret_cast<const uint8_t*>(&id);
    store->set(key, std::vector<uint8_t>(bytes, bytes + sizeof(id)));
  } else {
    std::vector<uint8_t> bytes = store->get(key);
    TORCH_CHECK(bytes.size() == sizeof(id), "weft: the store holds a malformed unique id");
    std::memcpy(&id, bytes.data(), sizeof(id));
  }
  weftConfig_t config = WEFT_CONFIG_INITIALIZER;
  config.timeoutMs = static_cast<int>(std::clamp<int64_t>(timeout.count(), 1, std::numeric_limits<int>::max()));
  weftComm_t comm = nullptr;
  check(weftCommInitRankConfig(&comm, size, id, rank, &config), nullptr, "weftCommInitRankConfig");
  return comm;
}

ProcessGroupWeft::ProcessGroupWeft(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                   std::chrono::milliseconds timeout)
    : BackendBase(rank, size), store_(store), timeout_(timeout) {
  // One id per process group: torch hands each group its own prefixed store.
  comm_ = initCommThroughStore(store, rank, size, timeout, "weft_unique_id");
  // From here on this process's large CPU tensors are in shared memory, DDP's buckets among them.
  if (size > 1) installSharedCpuAllocator();
  futurer_ = std::thread([queue = futureQueue_] { futureLoop(queue); });
  completer_ = std::thread([this] { completionLoop(); });
}

// Python may drop the last reference holding the GIL (destroy_process_group, del). The threads
// joined here may then be freeing a finished Work's tensors, whose Python objects (the caller
// passed temporaries) need the GIL: so the GIL is let go for the teardown.
ProcessGroupWeft::~ProcessGroupWeft() {
  std::optional<pybind11::gil_scoped_release> withoutGil;
  if (Py_IsInitialized() && PyGILState_Check()) withoutGil.emplace();
  {
    std::lock_guard<std::mutex> lock(issueMutex_);
    issueDeferredLocked();  // nothing may call back into this group after it is gone
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (completer_.joinable()) completer_.join();
  {
    std::lock_guard<std::mutex> lock(futureQueue_->mutex);
    futureQueue_->stopping = true;
  }
  futureQueue_->changed.notify_all();
  if (futurer_.get_id() == std::this_thread::get_id()) {
    futurer_.detach();  // a callback dropped the last reference; the thread drains its queue and ends
  } else if (futurer_.joinable()) {
    futurer_.join();
  }
  lane_.reset();
  if (comm_ != nullptr) weftCommDestroy(comm_);
}

void ProcessGroupWeft::completionLoop() {
  for (;;) {
    c10::intrusive_ptr<WeftWork> work;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
      if (pending_.empty()) return;  // stopping, and everything issued has completed
      work = pending_.front();
      pending_.pop_front();
    }
    work->complete();
    {
      std::lock_guard<std::mutex> lock(futureQueue_->mutex);
      futureQueue_->works.push_back(std::move(work));
    }
    futureQueue_->changed.notify_one();
  }
}

void ProcessGroupWeft::futureLoop(const std::shared_ptr<FutureQueue>& queue) {
  for (;;) {
    c10::intrusive_ptr<WeftWork> work;
    {
      std::unique_lock<std::mutex> lock(queue->mutex);
      queue->changed.wait(lock, [&] { return queue->stopping || !queue->works.empty(); });
      if (queue->works.empty()) return;  // stopping, and every completed Work's future is done
      work = std::move(queue->works.front());
      queue->works.pop_front();
    }
    work->completeFuture();  // runs then() callbacks, which may destroy the process group
  }
}

c10::intrusive_ptr<BackendBase> ProcessGroupWeft::create(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                         int size, const std::chrono::duration<float>& timeout) {
  return c10::make_intrusive<ProcessGroupWeft>(store, rank, size,
                                               std::chrono::duration_cast<std::chrono::milliseconds>(timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupWeft::broadcast(std::vector<at::Tensor>& tensors,
                                                           const c10d::BroadcastOptions& opts) {
  checkSingle(tensors, "broadcast");
  at::Tensor t = tensors[0], d = denseOutput(t, "broadcast");
  return submit(c10d::OpType::BROADCAST, d, {t}, [&](weftComm_t comm, weftStream_t s) {
    return weftBcast(d.data_ptr(), count(d), weftType(d), static_cast<int>(opts.rootRank), comm, s);
  }, [t, d] { copyBack(t, d); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupWeft::allreduce(std::vector<at::Tensor>& tensors,
                                                           const c10d::AllreduceOptions& opts) {
  checkSingle(tensors, "allreduce");
  at::Tensor t = tensors[0], d = denseOutput(t, "allreduce");
  const Reduction r = reductionOf(opts.reduceOp, d);
  return submit(c10d::OpType::ALLREDUCE, d, {t}, [&](weftComm_t comm, weftStream_t s) {
    return withOperator(r, comm, weftType(d), [&](weftRedOp_t op) {
      return weftAllReduce(d.data_ptr(), d.data_ptr(), count(d), weftType(d), op, comm, s);
    });
  }, [t, d] { copyBack(t, d); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupWeft::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                     const c10d::AllreduceCoalescedOptions& opts) {
  // Everything that can throw comes before the group opens: a throw inside it would leave
  // this thread's Weft group open, and every later call would join it.
  std::vector<at::Tensor> denses;
  std::vector<Reduction> reductions;
  std::vector<weftDataType_t> types;
  for (const auto& t : tensors) {
    checkTensor(t);
    TORCH_CHECK(t.device() == tensors[0].device(), "weft: allreduce_coalesced: tensors on ", tensors[0].device(),
                " and on ", t.device());
    denses.push_back(denseOutput(t, "allreduce_coalesced"));
    reductions.push_back(reductionOf(opts.reduceOp, t));
    types.push_back(weftType(t));
  }
  std::vector<at::Tensor> outputs = tensors;
  return submit(c10d::OpType::ALLREDUCE_COALESCED, denses.empty() ? at::Tensor() : denses[0], outputs, [&](weftComm_t comm, weftStream_t s) {
    weftResult_t rc = weftGroupStart();
    for (size_t i = 0; i < denses.size(); ++i) {
      const at::Tensor& d = denses[i];
      weftResult_t one = withOperator(reductions[i], comm, types[i], [&](weftRedOp_t op) {
        return weftAllReduce(d.data_ptr(), d.data_ptr(), count(d), types[i], op, comm, s);
      });
      if (rc == weftSuccess) rc = one;
    }
    weftResult_t end = weftGroupEnd();
    return rc != weftSuccess ? rc : end;
  }, [outputs, denses] {
    for (size_t i = 0; i < outputs.size(); ++i) copyBack(outputs[i], denses[i]);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupWeft::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  checkSingle(tensors, "reduce");
  at::Tensor t = tensors[0], d = denseOutput(t, "reduce");
  const Reduction r = reductionOf(opts.reduceOp, d);
  return submit(c10d::OpType::REDUCE, d, {t}, [&](weftComm_t comm, weftStream_t s) {
    return withOperator(r, comm, weftType(d), [&](weftRedOp_t op) {
      return weftReduce(d.data_ptr(), d.data_ptr(), count(d), weftType(d), op, static_cast<int>(opts.rootRank), comm, s);
    });
  }, [t, d] { copyBack(t, d); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupWeft::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           const c10d::AllgatherOptions&) {
  checkSingle(inputs, "allgather");
  TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(),
              "weft: allgather needs one output list of ", getSize(), " tensors");
  at::Tensor in = dense(inputs[0]);
  checkPieces(outputs[0], in, "allgather");
  for (const auto& o : outputs[0]) checkWritable(o, "allgather");
  at::Tensor flat = at::empty({getSize() * in.numel()}, in.options());
  std::vector<at::Tensor> outs = outputs[0];
  return submit(c10d::OpType::ALLGATHER, in, outs, [&](weftComm_t comm, weftStream_t s) {
    return weftAllGather(in.data_ptr(), flat.data_ptr(), count(in), weftType(in), comm, s);
  }, [outs, flat, in] {
    for (size_t i = 0; i < outs.size(); ++i) {
      outs[i].copy_(flat.narrow(0, static_cast<int64_t>(i) * in.numel(), in.numel()).view(outs[i].sizes()));
    }
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupWeft::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                 const c10d::AllgatherOptions&) {
  checkTensor(output);
  checkTensor(input);
  TORCH_CHECK(output.numel() == input.numel() * getSize(), "weft: _allgather_base output must hold size x input");
  checkSameType(input, output, "_allgather_base");
  at::Tensor out = output, d = denseOutput(output, "_allgather_base"), in = dense(input);
  return submit(c10d::OpType::_ALLGATHER_BASE, in, {out}, [&](weftComm_t comm, weftStream_t s) {
    return weftAllGather(in.data_ptr(), d.data_ptr(), count(in), weftType(in), comm, s);
  }, [out, d, in] { copyBack(out, d); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupWeft::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                        std::vector<at::Tensor>& inputs,
                                                        const c10d::GatherOptions& opts) {
  checkSingle(inputs, "gather");
  const int root = static_cast<int>(opts.rootRank);
  const bool isRoot = getRank() == root;
  TORCH_CHECK(!isRoot || (outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize()),
              "weft: gather needs one output list of ", getSize(), " tensors at the root");
  at::Tensor in = dense(inputs[0]);
  if (isRoot) {
    checkPieces(outputs[0], in, "gather");
    for (const auto& o : outputs[0]) checkWritable(o, "gather");
  }
  at::Tensor flat = isRoot ? at::empty({getSize() * in.numel()}, in.options()) : at::Tensor();
  std::vector<at::Tensor> outs = isRoot ? outputs[0] : std::vector<at::Tensor>{};
  return submit(c10d::OpType::GATHER, in, outs, [&](weftComm_t comm, weftStream_t s) {
    return weftGather(in.data_ptr(), isRoot ? flat.data_ptr() : nullptr, count(in), weftType(in), root, comm, s);
  }, [outs, flat, in] {
    for (size_t i = 0; i < outs.size(); ++i) {
      outs[i].copy_(flat.narrow(0, static_cast<int64_t>(i) * in.numel(), in.numel()).view(outs[i].sizes()));
    }
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupWeft::scatter(std::vector<at::Tensor>& outputs,
                                                         std::vector<std::vector<at::Tensor>>& inputs,
                                                         const c10d::ScatterOptions& opts) {
  checkSingle(outputs, "scatter");
  const int root = static_cast<int>(opts.rootRank);
  const bool isRoot = getRank() == root;
  TORCH_CHECK(!isRoot || (inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize()),
              "weft: scatter needs one input list of ", getSize(), " tensors at the root");
  at::Tensor out = outputs[0], d = denseOutput(out, "scatter");
  at::Tensor flat;
  if (isRoot) {
    checkPieces(inputs[0], out, "scatter");
    std::vector<at::Tensor> pieces;
    for (const auto& t : inputs[0]) pieces.push_back(t.reshape({-1}));
    flat = at::cat(pieces);
  }
  return submit(c10d::OpType::SCATTER, d, {out}, [&](weftComm_t comm, weftStream_t s) {
    return weftScatter(isRoot ? flat.data_ptr() : nullptr, d.data_ptr(), count(d), weftType(d), root, comm, s);
  }, [out, d, flat] { copyBack(out, d); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupWeft::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                                const c10d::ReduceScatterOptions& opts) {
  checkSingle(outputs, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(),
              "weft: reduce_scatter needs one input list of ", getSize(), " tensors");
  at::Tensor out = outputs[0], d = denseOutput(out, "reduce_scatter");
  checkPieces(inputs[0], out, "reduce_scatter");
  std::vector<at::Tensor> pieces;
  for (const auto& t : inputs[0]) pieces.push_back(t.reshape({-1}));
  at::Tensor flat = at::cat(pieces);
  const Reduction r = reductionOf(opts.reduceOp, d);
  return submit(c10d::OpType::REDUCE_SCATTER, d, {out}, [&](weftComm_t comm, weftStream_t s) {
    return withOperator(r, comm, weftType(d), [&](weftRedOp_t op) {
      return weftReduceScatter(flat.data_ptr(), d.data_ptr(), count(d), weftType(d), op, comm, s);
    });
  }, [out, d, flat] { copyBack(out, d); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupWeft::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                      const c10d::ReduceScatterOptions& opts) {
  checkTensor(output);
  checkTensor(input);
  TORCH_CHECK(input.numel() == output.numel() * getSize(), "weft: _reduce_scatter_base input must hold size x output");
  checkSameType(input, output, "_reduce_scatter_base");
  at::Tensor out = output, d = denseOutput(output, "_reduce_scatter_base"), in = dense(input);
  const Reduction r = reductionOf(opts.reduceOp, d);
  return submit(c10d::OpType::_REDUCE_SCATTER_BASE, in, {out}, [&](weftComm_t comm, weftStream_t s) {
    return withOperator(r, comm, weftType(d), [&](weftRedOp_t op) {
      return weftReduceScatter(in.data_ptr(), d.data_ptr(), count(d), weftType(d), op, comm, s);
    });
  }, [out, d, in] { copyBack(out, d); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupWeft::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                               std::vector<int64_t>& outputSplits,
                                                               std::vector<int64_t>& inputSplits,
                                                               const c10d::AllToAllOptions&) {
  checkTensor(output);
  checkTensor(input);
  checkSameType(input, output, "alltoall_base");
  at::Tensor out = output, d = denseOutput(output, "alltoall_base"), in = dense(input);
  const int n = getSize();
  const weftDataType_t type = weftType(in);
  if (outputSplits.empty() && inputSplits.empty()) {
    TORCH_CHECK(in.numel() == d.numel() && in.numel() % n == 0, "weft: alltoall_base needs equal, divisible sizes");
    return submit(c10d::OpType::ALLTOALL_BASE, in, {out}, [&](weftComm_t comm, weftStream_t s) {
      return weftAlltoAll(in.data_ptr(), d.data_ptr(), count(in) / static_cast<size_t>(n), type, comm, s);
    }, [out, d, in] { copyBack(out, d); });
  }
  const std::vector<int64_t> inSplits = rowSplits(inputSplits, in, n, "input");
  const std::vector<int64_t> outSplits = rowSplits(outputSplits, d, n, "output");
  // Elements a row: as rowSplits counts rows, a 0-d tensor is one row of one element.
  auto rowElements = [](const at::Tensor& t) -> int64_t {
    return t.dim() == 0 ? 1 : t.size(0) > 0 ? t.numel() / t.size(0) : 0;
  };
  const int64_t inRow = rowElements(in), outRow = rowElements(d);
  const size_t esize = in.element_size();
  return submit(c10d::OpType::ALLTOALL_BASE, in, {out}, [&](weftComm_t comm, weftStream_t s) {
    weftResult_t rc = weftGroupStart();
    int64_t inAt = 0, outAt = 0;
    for (int p = 0; p < n; ++p) {
      auto* src = static_cast<char*>(in.data_ptr()) + static_cast<size_t>(inAt * inRow) * esize;
      auto* dst = static_cast<char*>(d.data_ptr()) + static_cast<size_t>(outAt * outRow) * esize;
      weftResult_t a = weftSend(src, static_cast<size_t>(inSplits[p] * inRow), type, p, comm, s);
      weftResult_t b = weftRecv(dst, static_cast<size_t>(outSplits[p] * outRow), type, p, comm, s);
      if (rc == weftSuccess) rc = a != weftSuccess ? a : b;
      inAt += inSplits[p];
      outAt += outSplits[p];
    }
    weftResult_t end = weftGroupEnd();
    return rc != weftSuccess ? rc : end;
  }, [out, d, in] { copyBack(out, d); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupWeft::alltoall(std::vector<at::Tensor>& outputs,
                                                          std::vector<at::Tensor>& inputs, const c10d::AllToAllOptions&) {
  const int n = getSize();
  TORCH_CHECK(static_cast<int>(outputs.size()) == n && static_cast<int>(inputs.size()) == n,
              "weft: alltoall needs ", n, " input and output tensors");
  std::vector<at::Tensor> ins, outs;
  std::vector<weftDataType_t> types;
  for (int p = 0; p < n; ++p) {
    checkTensor(inputs[static_cast<size_t>(p)]);
    checkTensor(outputs[static_cast<size_t>(p)]);
    checkSameType(inputs[static_cast<size_t>(p)], outputs[static_cast<size_t>(p)], "alltoall");
    TORCH_CHECK(inputs[static_cast<size_t>(p)].device() == inputs[0].device(), "weft: alltoall: tensors on ",
                inputs[0].device(), " and on ", inputs[static_cast<size_t>(p)].device());
    ins.push_back(dense(inputs[static_cast<size_t>(p)]));
    outs.push_back(denseOutput(outputs[static_cast<size_t>(p)], "alltoall"));
    types.push_back(weftType(ins.back()));
  }
  std::vector<at::Tensor> results = outputs;
  return submit(c10d::OpType::ALLTOALL, ins[0], results, [&](weftComm_t comm, weftStream_t s) {
    weftResult_t rc = weftGroupStart();
    for (int p = 0; p < n; ++p) {
      const auto& a = ins[static_cast<size_t>(p)];
      const auto& b = outs[static_cast<size_t>(p)];
      weftResult_t x = weftSend(a.data_ptr(), count(a), types[static_cast<size_t>(p)], p, comm, s);
      weftResult_t y = weftRecv(b.data_ptr(), count(b), types[static_cast<size_t>(p)], p, comm, s);
      if (rc == weftSuccess) rc = x != weftSuccess ? x : y;
    }
    weftResult_t end = weftGroupEnd();
    return rc != weftSuccess ? rc : end;
  }, [results, outs, ins] {
    for (size_t i = 0; i < results.size(); ++i) copyBack(results[i], outs[i]);
  });
}

namespace {

// Weft, as NCCL, matches a pair's messages in the order they were posted; gloo matches tags.
// A script written for gloo's tags could get its messages swapped without a word: say so once.
void warnIfTagged(int tag) {
  if (tag != 0) {
    TORCH_WARN_ONCE("weft: send/recv tags are ignored, as with NCCL: messages between two ranks are received in "
                    "the order they were sent (tag ", tag, ")");
  }
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupWeft::send(std::vector<at::Tensor>& tensors, int dstRank, int tag) {
  warnIfTagged(tag);
  checkSingle(tensors, "send");
  at::Tensor d = dense(tensors[0]);
  const weftDataType_t type = weftType(d);
  return defer(c10d::OpType::SEND, d, {tensors[0]}, [d, type, dstRank](weftComm_t comm, weftStream_t s) {
    return weftSend(d.data_ptr(), count(d), type, dstRank, comm, s);
  }, [d] {});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupWeft::recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) {
  warnIfTagged(tag);
  checkSingle(tensors, "recv");
  at::Tensor t = tensors[0], d = denseOutput(t, "recv");
  const weftDataType_t type = weftType(d);
  return defer(c10d::OpType::RECV, d, {t}, [d, type, srcRank](weftComm_t comm, weftStream_t s) {
    return weftRecv(d.data_ptr(), count(d), type, srcRank, comm, s);
  }, [t, d] { copyBack(t, d); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupWeft::barrier(const c10d::BarrierOptions&) {
  return submit(c10d::OpType::BARRIER, at::Tensor(), {}, [&](weftComm_t comm, weftStream_t s) { return weftBarrier(comm, s); });
}

}  // namespace weft_torch
