// What the GPU tests share: a skip where no GPU is visible, each run's random seed and inputs,
// the host reference of a reduction, device buffers and a rank's communicator and streams, and
// running a test body on several rank counts (processes sharing GPU 0).
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "kernels/gpu/gpu_runtime.h"
#include "multiprocess.h"
#include "weft/weft.h"

namespace weft::test {

// Exits the test binary with 77 (ctest: skipped), saying so, where no GPU is visible.
void skipWithoutGpu();

// This run's seed (printed with every failure): fresh data each run.
uint64_t runSeed();

// Rank r's input for a case: the same on every rank, so each can compute the reference. Small
// integers (but for full-width integer sums, maxima and minima), so that every format holds
// every input, partial sum and product exactly.
std::vector<double> inputOf(int rank, int caseIndex, size_t count, weftDataType_t t, weftRedOp_t op);
std::vector<unsigned char> encode(const std::vector<double>& values, weftDataType_t t);

// The value x as type t holds it (PreMulSum rounds each scaled input).
double rounded(double x, weftDataType_t t);

// Element i of the reduction of every rank's input (each scaled by scale(rank), its PreMulSum
// scalar, first; 1 without PreMulSum), encoded in t at out[at].
void reference(void* out, size_t at, const std::vector<std::vector<double>>& in, size_t i, weftDataType_t t,
               weftRedOp_t op, const std::function<double(int)>& scale);

// fill and poison wait for the device: a copy from pageable memory may return before its DMA
// lands, and the collectives run on non-blocking streams, which do not order against it.
struct DeviceBuffer {
  explicit DeviceBuffer(size_t size) : bytes(size) { (void)gpuMalloc(&ptr, size > 0 ? size : 1); }
  ~DeviceBuffer() { (void)gpuFree(ptr); }
  void fill(const std::vector<unsigned char>& from) const {
    (void)gpuMemcpy(ptr, from.data(), from.size(), gpuMemcpyHostToDevice);
    (void)gpuDeviceSynchronize();
  }
  void poison() const { fill(std::vector<unsigned char>(bytes, 0xA5)); }
  std::vector<unsigned char> read() const {
    std::vector<unsigned char> out(bytes);
    (void)gpuMemcpy(out.data(), ptr, bytes, gpuMemcpyDeviceToHost);
    return out;
  }
  void* ptr = nullptr;
  size_t bytes;
};

// A minute's timeout: a test that hangs fails in that time rather than the default 5 minutes.
struct GpuRank {
  explicit GpuRank(RankContext& c, int timeoutMs = 60000) : ctx(c) {
    RANK_CHECK(ctx, gpuSetDevice(0) == gpuSuccess, "cudaSetDevice(0)");
    for (auto& s : streams) RANK_CHECK(ctx, gpuStreamCreateWithFlags(&s, gpuStreamNonBlocking) == gpuSuccess, "stream");
    weftConfig_t config = WEFT_CONFIG_INITIALIZER;
    config.timeoutMs = timeoutMs;
    RANK_WEFT(ctx, weftCommInitRankConfig(&comm, ctx.nranks, ctx.id, ctx.rank, &config));
  }
  ~GpuRank() {
    weftCommDestroy(comm);
    for (auto& s : streams) (void)gpuStreamDestroy(s);
  }
  // The stream for the k-th call: calls alternate between two streams, each synchronized.
  gpuStream_t stream(int k) const { return streams[k % 2]; }
  void sync(int k) {
    RANK_CHECK(ctx, gpuStreamSynchronize(stream(k)) == gpuSuccess, "stream sync");
    weftResult_t async = weftSuccess;
    weftCommGetAsyncError(comm, &async);
    RANK_CHECK(ctx, async == weftSuccess, "async error %s: %s", weftGetErrorString(async), weftGetLastError(comm));
  }
  RankContext& ctx;
  weftComm_t comm = nullptr;
  gpuStream_t streams[2] = {};
};

// Runs body as every rank of each rank count, each rank a process on GPU 0; a rank count that
// takes over 4 minutes fails with the ranks' output.
void runOnRanks(int (*body)(RankContext&), std::vector<int> rankCounts = {1, 2, 3, 4, 8});

}  // namespace weft::test
