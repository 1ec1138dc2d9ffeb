// The torch backend's argument handling: tensors to Weft types and counts, the checks that
// keep lists, splits and types from running past a buffer, c10d reductions to Weft operators,
// and Weft errors as exceptions.
#pragma once

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <c10/util/Exception.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "process_group_weft.hpp"

namespace weft_torch {

// Weft's error as a C++ exception (torch turns it into a Python RuntimeError with the text).
inline void check(weftResult_t rc, weftComm_t comm, const char* what) {
  if (rc == weftSuccess) return;
  throw std::runtime_error(std::string("weft: ") + what + ": " + weftGetErrorString(rc) + ": " + weftGetLastError(comm));
}

inline weftDataType_t weftType(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return weftFloat32;
    case at::kDouble: return weftFloat64;
    case at::kHalf: return weftFloat16;
    case at::kBFloat16: return weftBfloat16;
    case at::kInt: return weftInt32;
    case at::kLong: return weftInt64;
    case at::kChar: return weftInt8;
    case at::kByte:
    case at::kBool: return weftUint8;
    default: break;
  }
  TORCH_CHECK(false, "weft: tensors of type ", t.scalar_type(), " are not supported");
}

inline void checkTensor(const at::Tensor& t) {
#ifdef WEFT_TORCH_CUDA
  TORCH_CHECK(t.device().is_cpu() || t.device().is_cuda(), "weft: tensors must be on the CPU or a CUDA GPU (got one on ",
              t.device(), ")");
#else
  TORCH_CHECK(t.device().is_cpu(), "weft: this build handles CPU tensors only (got one on ", t.device(),
              "); CUDA tensors need weft_torch built against a torch with CUDA");
#endif
  TORCH_CHECK(!t.is_sparse(), "weft: sparse tensors are not supported");
}

inline void checkSingle(const std::vector<at::Tensor>& tensors, const char* what) {
  TORCH_CHECK(tensors.size() == 1, "weft: ", what, " takes one tensor per rank, got ", tensors.size());
  checkTensor(tensors[0]);
}

inline void checkSameType(const at::Tensor& a, const at::Tensor& b, const char* what) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "weft: ", what, ": input and output types differ (", a.scalar_type(),
              " and ", b.scalar_type(), ")");
  TORCH_CHECK(a.device() == b.device(), "weft: ", what, ": input and output are on different devices (", a.device(),
              " and ", b.device(), ")");
}

// Each tensor of a per-rank list must hold what `like` holds: the list goes through one flat
// buffer of `like.numel()` elements per rank, so a tensor of another size or type would be
// read or written past its end.
inline void checkPieces(const std::vector<at::Tensor>& list, const at::Tensor& like, const char* what) {
  for (const auto& t : list) {
    checkTensor(t);
    TORCH_CHECK(t.numel() == like.numel() && t.scalar_type() == like.scalar_type() && t.device() == like.device(),
                "weft: ", what, ": every tensor of the list must hold ", like.numel(), " elements of type ",
                like.scalar_type(), " on ", like.device(), ", got ", t.numel(), " of type ", t.scalar_type(), " on ",
                t.device());
  }
}

// Rows per rank of an all-to-all: `splits`, or equal shares when it is empty (as c10d allows).
inline std::vector<int64_t> rowSplits(const std::vector<int64_t>& splits, const at::Tensor& t, int n, const char* which) {
  const int64_t rows = t.dim() > 0 ? t.size(0) : t.numel();
  if (splits.empty()) {
    TORCH_CHECK(rows % n == 0, "weft: alltoall_base: the ", which, " tensor's ", rows, " rows do not split evenly over ", n,
                " ranks");
    return std::vector<int64_t>(static_cast<size_t>(n), rows / n);
  }
  TORCH_CHECK(static_cast<int>(splits.size()) == n, "weft: alltoall_base: ", which, " splits need one entry per rank (", n,
              "), got ", splits.size());
  int64_t sum = 0;
  for (int64_t r : splits) {
    TORCH_CHECK(r >= 0, "weft: alltoall_base: negative ", which, " split ", r);
    sum += r;
  }
  TORCH_CHECK(sum == rows, "weft: alltoall_base: ", which, " splits add up to ", sum, " rows, but the tensor has ", rows);
  return splits;
}

// A contiguous view of t, or a contiguous copy (whose result finish() copies back into t).
inline at::Tensor dense(const at::Tensor& t) { return t.is_contiguous() ? t : t.contiguous(); }

// The same for an output, which the result is copied into once the ranks have communicated:
// a tensor whose elements share memory (an expand()ed view), which torch cannot write, is
// refused before anything runs, not after.
inline void checkWritable(const at::Tensor& t, const char* what) {
  TORCH_CHECK(at::has_internal_overlap(t) != at::MemOverlap::Yes, "weft: ", what,
              ": the output tensor has elements that share memory (an expand()ed view?), which cannot be written");
}
inline at::Tensor denseOutput(const at::Tensor& t, const char* what) {
  checkWritable(t, what);
  return dense(t);
}

inline void copyBack(const at::Tensor& to, const at::Tensor& from) {
  if (!to.is_same(from)) to.copy_(from);
}

// The Weft operator for a c10d reduction; PreMulSum gets an operator made for this call.
struct Reduction {
  weftRedOp_t op = weftSum;
  bool premul = false;
  at::Tensor factor;  // one element of the tensor's type
};

// PREMUL_SUM's factor as a 0-d tensor. torch 1.13 and 2.0 keep a tensor factor in a vector
// (tensor_factors), later torch in one tensor (tensor_factor); either may be empty, and then the
// factor is the double.
template <typename Supplement>
at::Tensor preMulSumFactor(const Supplement& s) {
  if constexpr (requires { s.tensor_factors; }) {
    if (!s.tensor_factors.empty()) return s.tensor_factors[0].reshape({});
  } else {
    if (s.tensor_factor.defined()) return s.tensor_factor.reshape({});
  }
  return at::scalar_tensor(s.double_factor);
}

inline Reduction reductionOf(const c10d::ReduceOp& op, const at::Tensor& like) {
  Reduction r;
  switch (op.op_) {
    case c10d::ReduceOp::SUM: r.op = weftSum; break;
    case c10d::ReduceOp::AVG: r.op = weftAvg; break;
    case c10d::ReduceOp::PRODUCT: r.op = weftProd; break;
    case c10d::ReduceOp::MIN: r.op = weftMin; break;
    case c10d::ReduceOp::MAX: r.op = weftMax; break;
    case c10d::ReduceOp::PREMUL_SUM: {
      auto* supplement = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
      TORCH_CHECK(supplement != nullptr, "weft: PREMUL_SUM without its factor");
      // As ProcessGroupNCCL: the factor would be cast to the tensor's type (0.5 to 0 for ints).
      TORCH_CHECK(at::isFloatingType(like.scalar_type()), "weft: PREMUL_SUM needs a floating-point tensor (half, ",
                  "float, bfloat16 or double), got ", like.scalar_type());
      r.premul = true;
      // Weft reads the scalar on the host, when the operation is issued.
      r.factor = preMulSumFactor(*supplement).to(at::kCPU, like.scalar_type()).contiguous();
      break;
    }
    default: TORCH_CHECK(false, "weft: reduction op ", static_cast<int>(op.op_), " (bitwise) is not supported");
  }
  if (like.scalar_type() == at::kBool) {
    // As ProcessGroupNCCL: a bool is a byte holding 0 or 1, so SUM is a logical or (MAX, which
    // cannot overflow the byte) and PRODUCT a logical and (MIN); an average means nothing.
    TORCH_CHECK(r.op != weftAvg, "weft: bool tensors cannot be averaged (ReduceOp.AVG), as with NCCL");
    if (r.op == weftSum) r.op = weftMax;
    if (r.op == weftProd) r.op = weftMin;
  }
  return r;
}

// Runs `call(op)` with the Weft operator for `r` (making and dropping a PreMulSum one).
inline weftResult_t withOperator(const Reduction& r, weftComm_t comm, weftDataType_t type,
                          const std::function<weftResult_t(weftRedOp_t)>& call) {
  if (!r.premul) return call(r.op);
  weftRedOp_t op;
  weftResult_t rc = weftRedOpCreatePreMulSum(&op, r.factor.data_ptr(), type, weftScalarHostImmediate, comm);
  if (rc != weftSuccess) return rc;
  rc = call(op);  // the scalar was copied into the call: the operator can go now
  weftRedOpDestroy(op, comm);
  return rc;
}

inline size_t count(const at::Tensor& t) { return static_cast<size_t>(t.numel()); }

}  // namespace weft_torch
