// libtorch adapter for the DDP layer (header-only; needs libtorch and libweft_ddp):
//
//   weft::ddp::TorchDDP ddp(comm, *model);   // broadcasts rank 0's parameters and buffers
//   loss.backward();                         // hooks feed each gradient to the reducer as it lands
//   ddp.finish();                            // gradients averaged over the ranks
//   optimizer.step();
#pragma once

#include <torch/torch.h>

#include <memory>
#include <set>
#include <stdexcept>
#include <string>

#include "weft/ddp.hpp"

namespace weft::ddp {

inline weftDataType_t torchToWeft(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kFloat: return weftFloat32;
    case torch::kDouble: return weftFloat64;
    case torch::kHalf: return weftFloat16;
    case torch::kBFloat16: return weftBfloat16;
    case torch::kInt: return weftInt32;
    case torch::kLong: return weftInt64;
    case torch::kByte: return weftUint8;
    case torch::kChar: return weftInt8;
    case torch::kBool: return weftUint8;  // one byte; only ever broadcast (a buffer such as a mask)
    default: throw std::invalid_argument("weft ddp: unsupported tensor type");
  }
}

class TorchDDP {
 public:
  // Parameters that take no gradient are kept in step by the broadcast only, as in PyTorch's
  // DDP. The hooks point at this object: it is neither copied nor moved, and removes them when
  // it goes.
  TorchDDP(weftComm_t comm, torch::nn::Module& module, size_t bucketCapBytes = Reducer::kDefaultBucketCapBytes)
      : comm_(comm), buffers_(module.buffers()) {
    // Broadcast writes numel() elements from data_ptr(): anything else would land in the
    // wrong elements, or past the tensor.
    for (auto& b : buffers_) {
      if (!b.is_contiguous() || !b.device().is_cpu()) throw std::invalid_argument("weft ddp: CPU contiguous buffers only");
    }
    std::vector<Parameter> raw;
    std::set<const void*> seen;  // a tied weight (one tensor in two modules) is listed once per module
    for (auto& p : module.parameters()) {
      if (!seen.insert(p.data_ptr()).second) continue;
      if (!p.is_contiguous() || !p.device().is_cpu()) throw std::invalid_argument("weft ddp: CPU contiguous parameters only");
      if (!p.requires_grad()) {
        frozen_.push_back(p);
        continue;
      }
      params_.push_back(p);
      raw.push_back({p.data_ptr(), nullptr, static_cast<size_t>(p.numel()), torchToWeft(p)});
    }
    reducer_ = std::make_unique<Reducer>(comm, std::move(raw), bucketCapBytes);
    check(reducer_->broadcastParameters(), "broadcasting parameters", reducer_->lastError());
    broadcastFromRankZero(frozen_, "broadcasting parameters that take no gradient");
    syncBuffers();
    for (size_t i = 0; i < params_.size(); ++i) {
      // The hook sees this backward's gradient before autograd adds it to .grad(). torch's DDP
      // averages the accumulated .grad() (gradients summed over backward calls without
      // zero_grad in between), so the bucket gets what .grad() is about to become.
      hooks_.push_back(params_[i].register_hook([this, i](torch::Tensor grad) {
        const torch::Tensor& accumulated = params_[i].grad();
        torch::Tensor dense = accumulated.defined() ? (accumulated + grad).contiguous() : grad.contiguous();
        check(reducer_->markReady(i, dense.data_ptr()), "starting a gradient bucket", reducer_->lastError());
      }));
    }
  }
  TorchDDP(const TorchDDP&) = delete;
  TorchDDP& operator=(const TorchDDP&) = delete;
  ~TorchDDP() {
    for (size_t i = 0; i < hooks_.size(); ++i) params_[i].remove_hook(hooks_[i]);
  }

  // Rank 0's buffers (batch-norm statistics) everywhere, as DDP does before each forward.
  void syncBuffers() { broadcastFromRankZero(buffers_, "broadcasting buffers"); }

  // After backward: waits for every bucket and puts the averaged gradients in .grad(). As in
  // torch's DDP (find_unused_parameters), a parameter this rank did not use adds its .grad()
  // (zeros where it has none), and one no rank used keeps its .grad(), undefined included.
  void finish() {
    std::vector<void*> out;
    std::vector<bool> made(params_.size(), false);
    for (size_t i = 0; i < params_.size(); ++i) {
      torch::Tensor& p = params_[i];
      if (!p.grad().defined()) {
        p.mutable_grad() = torch::zeros_like(p);
        made[i] = true;
      }
      out.push_back(p.grad().data_ptr());
    }
    const weftResult_t rc = reducer_->finish(out);
    for (size_t i = 0; i < params_.size(); ++i) {
      if (made[i] && (rc != weftSuccess || !reducer_->usedByAnyRank(i))) params_[i].mutable_grad() = torch::Tensor();
    }
    check(rc, "averaging gradients", reducer_->lastError());
  }

  const Reducer& reducer() const { return *reducer_; }

 private:
  void check(weftResult_t rc, const char* what, const std::string& why) const {
    if (rc != weftSuccess) {
      throw std::runtime_error(std::string("weft ddp: ") + what + ": " + weftGetErrorString(rc) + ": " + why);
    }
  }
  void check(weftResult_t rc, const char* what) const { check(rc, what, weftGetLastError(comm_)); }

  void broadcastFromRankZero(std::vector<torch::Tensor>& tensors, const char* what) {
    for (auto& t : tensors) check(weftBcast(t.data_ptr(), static_cast<size_t>(t.numel()), torchToWeft(t), 0, comm_, nullptr), what);
  }

  weftComm_t comm_;
  std::vector<torch::Tensor> params_;  // those that take a gradient, in the reducer's order
  std::vector<torch::Tensor> frozen_;
  std::vector<unsigned> hooks_;        // parallel to params_
  std::vector<torch::Tensor> buffers_;
  std::unique_ptr<Reducer> reducer_;
};

}  // namespace weft::ddp
