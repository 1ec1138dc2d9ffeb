#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cpu/reduce.h"
#include "weft/ddp.hpp"

namespace weft::ddp {
// kernels::dataTypeSize is inline (0 for a value that is no weftDataType_t): nothing of
// libweft's internals is linked.
using kernels::dataTypeSize;

Reducer::Reducer(weftComm_t comm, std::vector<Parameter> params, size_t bucketCapBytes)
    : comm_(comm), params_(std::move(params)), bucketOf_(params_.size()), slotOf_(params_.size()),
      ready_(params_.size(), false), used_(params_.size(), 0) {
  // Reverse registration order: backward produces the last layers' gradients first. A bucket
  // closes at the byte cap or where the element type changes.
  for (size_t k = params_.size(); k-- > 0;) {
    const Parameter& p = params_[k];
    if (dataTypeSize(p.type) == 0) {
      throw std::invalid_argument("weft ddp: parameter " + std::to_string(k) + " has an invalid data type (" +
                                  std::to_string(static_cast<int>(p.type)) + ")");
    }
    const size_t esize = dataTypeSize(p.type);
    if (p.count > SIZE_MAX / esize) {
      throw std::invalid_argument("weft ddp: parameter " + std::to_string(k) + "'s " + std::to_string(p.count) +
                                  " elements overflow size_t bytes");
    }
    const size_t bytes = p.count * esize;
    const size_t filled = buckets_.empty() ? 0 : buckets_.back().count * esize;
    if (buckets_.empty() || buckets_.back().type != p.type ||
        (bytes > bucketCapBytes - std::min(filled, bucketCapBytes) && !buckets_.back().params.empty())) {
      buckets_.push_back(Bucket{});
      buckets_.back().type = p.type;
    }
    Bucket& b = buckets_.back();  // whose bytes fit: at most the cap, or this parameter's alone
    bucketOf_[k] = buckets_.size() - 1;
    slotOf_[k] = b.params.size();
    b.params.push_back(k);
    b.offsets.push_back(b.count);
    b.count += p.count;
  }
  for (Bucket& b : buckets_) {
    const size_t bytes = b.count * dataTypeSize(b.type);
    void* memory = nullptr;
    FlatDeleter release{};  // from weftHostMemAlloc
    if (bytes == 0 || weftHostMemAlloc(&memory, bytes) != weftSuccess) {
      // Private pages instead, by mmap rather than malloc: a size no host holds fails with
      // ENOMEM here, where a sanitizer's malloc would end the process.
      release.privateBytes = std::max<size_t>(bytes, 1);
      memory = ::mmap(nullptr, release.privateBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (memory == MAP_FAILED) {
        throw std::runtime_error("weft ddp: cannot allocate a gradient bucket of " + std::to_string(bytes) + " bytes");
      }
    }
    b.flat = std::unique_ptr<unsigned char[], FlatDeleter>(static_cast<unsigned char*>(memory), release);
    b.pending = b.params.size();
  }
  if (weftStreamCreate(&stream_) != weftSuccess) throw std::runtime_error(weftGetLastError(nullptr));
}

void Reducer::FlatDeleter::operator()(unsigned char* p) const {
  if (privateBytes == 0) {
    (void)weftHostMemFree(p);
  } else {
    ::munmap(p, privateBytes);
  }
}

Reducer::~Reducer() {
  if (stream_ != nullptr) {
    (void)weftStreamSynchronize(stream_);
    weftStreamDestroy(stream_);
  }
}

weftResult_t Reducer::broadcastParameters() {
  weftResult_t rc = weftGroupStart();
  for (const Parameter& p : params_) {
    weftResult_t one = weftBcast(p.data, p.count, p.type, 0, comm_, nullptr);
    if (rc == weftSuccess) rc = one;
  }
  weftResult_t end = weftGroupEnd();
  if (rc == weftSuccess) rc = end;
  return rc == weftSuccess ? rc : failed(rc);
}

weftResult_t Reducer::failed(weftResult_t rc, std::string why) {
  // The thread's last error: every failed Weft call records it there (a stream's wait, with no
  // communicator to record it on, only there).
  lastError_ = why.empty() ? weftGetLastError(nullptr) : std::move(why);
  return rc;
}

weftResult_t Reducer::start(Bucket& b) {
  // A bucket that failed to issue is not tried again (a retry would come after later buckets,
  // out of the order every rank issues them in); finish() returns the failure instead of
  // gradients that were never averaged, even if markReady's error went unheeded.
  b.started = true;
  weftResult_t rc = weftAllReduce(b.flat.get(), b.flat.get(), b.count, b.type, weftAvg, comm_, stream_);
  if (rc == weftSuccess) return rc;
  if (startError_ == weftSuccess) startError_ = rc;
  return failed(rc);
}

weftResult_t Reducer::markReady(size_t index, const void* grad) {
  if (index >= params_.size()) {
    return failed(weftInvalidUsage, "weft ddp: markReady(" + std::to_string(index) + "): there are only " +
                                        std::to_string(params_.size()) + " parameters");
  }
  if (ready_[index]) {
    return failed(weftInvalidUsage, "weft ddp: markReady(" + std::to_string(index) + "): marked ready twice in one "
                                    "step (call finish() after each backward)");
  }
  const Parameter& p = params_[index];
  const void* from = grad != nullptr ? grad : p.grad;
  if (from == nullptr && p.count > 0) {
    return failed(weftInvalidArgument, "weft ddp: markReady(" + std::to_string(index) + "): no gradient given and "
                                       "the parameter has no grad buffer");
  }
  ready_[index] = true;
  Bucket& b = buckets_[bucketOf_[index]];
  const size_t esize = dataTypeSize(p.type);
  if (p.count > 0) std::memcpy(b.flat.get() + b.offsets[slotOf_[index]] * esize, from, p.count * esize);
  --b.pending;
  // Buckets start in bucket order on every rank (else ranks would issue their all-reduces in
  // different orders): each complete bucket waits for the ones before it.
  weftResult_t rc = weftSuccess;
  while (nextToStart_ < buckets_.size() && buckets_[nextToStart_].pending == 0) {
    weftResult_t one = start(buckets_[nextToStart_++]);
    if (rc == weftSuccess) rc = one;
  }
  return rc;
}

weftResult_t Reducer::finish(const std::vector<void*>& gradOut) {
  weftResult_t rc = weftSuccess;
  startedEarly_ = nextToStart_;
  auto outputOf = [&](size_t k) { return k < gradOut.size() && gradOut[k] != nullptr ? gradOut[k] : params_[k].grad; };
  for (Bucket& b : buckets_) {
    if (b.started) continue;
    // Gradients that never became ready (parameters this rank did not use) contribute what
    // their buffers hold, as torch's DDP adds an unused parameter's .grad.
    for (size_t slot = 0; slot < b.params.size(); ++slot) {
      const size_t k = b.params[slot];
      if (!ready_[k]) {
        const size_t esize = dataTypeSize(params_[k].type);
        unsigned char* at = b.flat.get() + b.offsets[slot] * esize;
        if (const void* held = outputOf(k)) std::memcpy(at, held, params_[k].count * esize);
        else std::memset(at, 0, params_[k].count * esize);  // no gradient at all: it contributes zero
      }
    }
    weftResult_t one = start(b);
    if (rc == weftSuccess) rc = one;
  }
  // After the buckets, in the same order on every rank: which parameters any rank used.
  for (size_t k = 0; k < params_.size(); ++k) used_[k] = ready_[k] ? 1 : 0;
  if (!used_.empty()) {
    weftResult_t flags = weftAllReduce(used_.data(), used_.data(), used_.size(), weftUint8, weftMax, comm_, stream_);
    if (flags != weftSuccess) failed(flags);
    if (rc == weftSuccess) rc = flags;
  }
  weftResult_t synced = weftStreamSynchronize(stream_);
  if (synced != weftSuccess) failed(synced);
  if (rc == weftSuccess) rc = synced;
  if (rc == weftSuccess) rc = startError_;
  startError_ = weftSuccess;
  for (Bucket& b : buckets_) {
    const size_t esize = dataTypeSize(b.type);
    for (size_t slot = 0; slot < b.params.size(); ++slot) {
      const size_t k = b.params[slot];
      void* out = outputOf(k);
      if (rc == weftSuccess && out != nullptr && used_[k]) {
        std::memcpy(out, b.flat.get() + b.offsets[slot] * esize, params_[k].count * esize);
      }
    }
    b.pending = b.params.size();
    b.started = false;
  }
  std::fill(ready_.begin(), ready_.end(), false);
  nextToStart_ = 0;
  return rc;
}

}  // namespace weft::ddp
