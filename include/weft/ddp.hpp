// A minimal data-parallel layer over raw buffers (C++17), in libweft_ddp:
//
//   weft::ddp::Reducer reducer(comm, params);      // params: data, grad, count, type
//   reducer.broadcastParameters();                 // rank 0's weights everywhere
//   for each step:
//     backward: reducer.markReady(i) as gradient i is computed (any order)
//     reducer.finish();                            // every gradient averaged over ranks
//
// Gradients are packed into buckets of about bucketCapBytes (default 25 MiB) in reverse
// registration order (the order backward produces them); as soon as a bucket's gradients are
// all ready (and the buckets before it have started: every rank starts them in the same order)
// its all-reduce starts on a host stream, overlapping the rest of backward.
//
// A bucket holding a gradient that never became ready this step (a parameter this rank did not
// use) starts only in finish(), with the buckets after it; which buckets start during backward
// can so differ between ranks. Issue nothing else on the communicator between backward and
// finish(), or the ranks' calls pair up differently. Such a gradient contributes what its
// buffer holds (finish's gradOut, else its grad buffer; zeros where it has none), as torch's
// DDP with find_unused_parameters adds an unused parameter's accumulated .grad. A parameter no
// rank used keeps its gradient buffer untouched, as in torch (finish also all-reduces one byte
// per parameter to learn which those are).
// DistributedSampler shards a dataset the way torch.utils.data.DistributedSampler does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "weft/weft.h"

namespace weft::ddp {

struct Parameter {
  void* data;   // the weights (broadcast from rank 0)
  void* grad;   // where the averaged gradient goes (and, by default, where it is read from)
  size_t count;
  weftDataType_t type;
};

class Reducer {
 public:
  static constexpr size_t kDefaultBucketCapBytes = size_t{25} << 20;

  // Throws std::invalid_argument for a parameter whose type is no weftDataType_t or whose bytes
  // overflow size_t, and std::runtime_error when a bucket or the host stream cannot be made.
  Reducer(weftComm_t comm, std::vector<Parameter> params, size_t bucketCapBytes = kDefaultBucketCapBytes);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Copies rank 0's weights into every rank's parameters (blocking).
  weftResult_t broadcastParameters();

  // Gradient `index` is complete: read it from `grad` (default: the parameter's grad buffer).
  // When this completes its bucket, the bucket's all-reduce starts at once. weftInvalidUsage:
  // no such index, or marked twice this step; weftInvalidArgument: neither `grad` nor the
  // parameter's grad buffer is given.
  weftResult_t markReady(size_t index, const void* grad = nullptr);

  // Starts any bucket not yet started, waits for all, and writes the averaged gradients to the
  // parameters' grad buffers (or to gradOut[i] where given; an unused gradient is read from
  // there too), except those of parameters no rank used. Resets for the next step.
  weftResult_t finish(const std::vector<void*>& gradOut = {});
  // Whether any rank marked parameter `index` ready in the step the last finish() ended.
  bool usedByAnyRank(size_t index) const { return index < used_.size() && used_[index] != 0; }

  // Why the last call that failed did: its own check, or the Weft call's last error.
  const std::string& lastError() const { return lastError_; }

  size_t bucketCount() const { return buckets_.size(); }
  // Buckets whose all-reduce started before finish() in the last step (overlap achieved).
  size_t bucketsStartedEarly() const { return startedEarly_; }

 private:
  struct FlatDeleter {
    // 0: from weftHostMemAlloc (weftHostMemFree); else a private mapping of this many bytes.
    // Value-initialized: a default member initializer here keeps Bucket{} from compiling (GCC).
    size_t privateBytes;
    void operator()(unsigned char* p) const;
  };
  struct Bucket {
    std::vector<size_t> params;   // indices, in bucket order
    std::vector<size_t> offsets;  // element offset of each in the flat buffer
    // From weftHostMemAlloc, so that ranks on one host all-reduce large buckets reading each
    // other's directly; private pages where that memory cannot be had.
    std::unique_ptr<unsigned char[], FlatDeleter> flat;
    weftDataType_t type;
    size_t count = 0;
    size_t pending = 0;  // gradients not yet ready this step
    bool started = false;
  };
  weftResult_t start(Bucket& bucket);
  // rc, after keeping `why` (or, for "", this thread's last Weft error) as lastError().
  weftResult_t failed(weftResult_t rc, std::string why = "");

  weftComm_t comm_;
  std::vector<Parameter> params_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucketOf_;  // by parameter
  std::vector<size_t> slotOf_;    // position within its bucket
  std::vector<bool> ready_;
  std::vector<uint8_t> used_;  // by parameter: 1 where any rank marked it ready (a MAX all-reduce)
  weftStream_t stream_ = nullptr;
  size_t nextToStart_ = 0;  // buckets start in order; this one is next
  size_t startedEarly_ = 0;
  weftResult_t startError_ = weftSuccess;  // a bucket's all-reduce failed to issue this step
  std::string lastError_;
};

// torch.utils.data.DistributedSampler's semantics: each of numReplicas ranks gets numSamples()
// indices; without dropLast the dataset is padded (by repeating its start) to an even split,
// with dropLast the tail is dropped; shuffled per (seed, epoch) when shuffle, into the very
// order torch's sampler gives (torch.randperm seeded with seed + epoch).
// Throws std::invalid_argument unless numReplicas >= 1 and 0 <= rank < numReplicas.
class DistributedSampler {
 public:
  DistributedSampler(size_t datasetSize, int numReplicas, int rank, bool shuffle = true, uint64_t seed = 0,
                     bool dropLast = false);
  void setEpoch(uint64_t epoch) { epoch_ = epoch; }
  size_t numSamples() const { return numSamples_; }
  std::vector<size_t> indices() const;

 private:
  size_t size_;
  int replicas_, rank_;
  bool shuffle_, dropLast_;
  uint64_t seed_, epoch_ = 0;
  size_t numSamples_;
};

}  // namespace weft::ddp
