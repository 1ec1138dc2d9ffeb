// The direct all-reduce over CUDA IPC (src/api/device_ipc_direct.h), which reads and writes the
// users' buffers in place, as processes sharing GPU 0: every type x operator, in and out of
// place, odd counts; more live buffers than a rank keeps mapped per peer, then old ones again;
// sub-buffers at unaligned offsets, send and receive in one allocation; a rank whose buffers
// cannot be shared (a stream-ordered pool, a small allocation) sends every rank to the copy-in
// path; a buffer smaller than the call and calls that differ between ranks fail on every rank,
// which can still go on. Every case turns the path on for all sizes
// (WEFT_CUDA_IPC_DIRECT_MIN_BYTES=0) and keeps the buffers it shares allocated until its
// communicator is destroyed, as the path's contract asks (CUDA leaves undefined a free of
// memory another process maps).
#include <catch2/catch.hpp>

#include <cinttypes>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "element_codec.h"
#include "gpu/gpu_ranks.h"

using namespace weft::test;

namespace {

#if defined(WEFT_GPU_HIP)
#define gpuMallocAsync hipMallocAsync
#define gpuFreeAsync hipFreeAsync
#else
#define gpuMallocAsync cudaMallocAsync
#define gpuFreeAsync cudaFreeAsync
#endif

constexpr size_t kPage = size_t{2} << 20;  // allocations of whole 2 MiB pages are shared

std::vector<unsigned char> expectedOf(int n, int caseIndex, size_t count, weftDataType_t t, weftRedOp_t op) {
  std::vector<std::vector<double>> in;
  for (int r = 0; r < n; ++r) in.push_back(inputOf(r, caseIndex, count, t, op));
  std::vector<unsigned char> expect(count * typeSize(t));
  for (size_t i = 0; i < count; ++i) reference(expect.data(), i, in, i, t, op, [](int) { return 1.0; });
  return expect;
}

std::vector<unsigned char> readBack(const void* at, size_t bytes) {
  std::vector<unsigned char> out(bytes);
  (void)gpuMemcpy(out.data(), at, bytes, gpuMemcpyDeviceToHost);
  return out;
}

void upload(void* at, const std::vector<unsigned char>& bytes) {
  (void)gpuMemcpy(at, bytes.data(), bytes.size(), gpuMemcpyHostToDevice);
  (void)gpuDeviceSynchronize();
}

// Every type x operator x count, out of place then in place, on two buffers made once.
int everyTypeAndOp(RankContext& ctx) {
  DeviceBuffer send(2 * kPage), recv(2 * kPage);  // declared first: they outlive the communicator
  GpuRank g(ctx);
  const weftDataType_t types[] = {weftInt8,    weftUint8,   weftInt32,  weftUint32,     weftInt64,     weftUint64,
                                  weftFloat16, weftFloat32, weftFloat64, weftBfloat16, weftFloat8e4m3, weftFloat8e5m2};
  int k = 8000;
  for (weftDataType_t t : types) {
    for (int opIndex = 0; opIndex < 5; ++opIndex) {  // Sum, Prod, Max, Min, Avg
      const auto op = static_cast<weftRedOp_t>(opIndex);
      for (size_t count : {size_t{1}, size_t{7}, size_t{4099}, size_t{65541}}) {
        ++k;
        const size_t bytes = count * typeSize(t);
        const auto expect = expectedOf(ctx.nranks, k, count, t, op);
        upload(send.ptr, encode(inputOf(ctx.rank, k, count, t, op), t));
        recv.poison();
        RANK_WEFT(ctx, weftAllReduce(send.ptr, recv.ptr, count, t, op, g.comm, g.stream(k)));
        g.sync(k);
        RANK_CHECK(ctx, readBack(recv.ptr, bytes) == expect, "out of place: type %d op %d count %zu ranks %d seed %" PRIu64,
                   t, opIndex, count, ctx.nranks, runSeed());
        RANK_WEFT(ctx, weftAllReduce(send.ptr, send.ptr, count, t, op, g.comm, g.stream(k + 1)));
        g.sync(k + 1);
        RANK_CHECK(ctx, readBack(send.ptr, bytes) == expect, "in place: type %d op %d count %zu ranks %d seed %" PRIu64,
                   t, opIndex, count, ctx.nranks, runSeed());
      }
    }
  }
  return 0;
}

// 80 buffers, each in an allocation of its own (1-3 pages): more than the 64 mappings a rank
// keeps per peer, so the least used are closed; the last 16 rounds use the first buffers again,
// which must be mapped anew. Sub-buffers start 0-4 elements in; odd rounds receive behind the
// send buffer in the same allocation, even rounds in place.
int manyBuffers(RankContext& ctx) {
  std::vector<std::unique_ptr<DeviceBuffer>> buffers;  // first: they outlive the communicator
  for (int b = 0; b < 80; ++b) buffers.push_back(std::make_unique<DeviceBuffer>(kPage * static_cast<size_t>(1 + b % 3)));
  GpuRank g(ctx);
  for (int round = 0; round < 96; ++round) {
    const size_t count = 1000 + static_cast<size_t>(round) * 37, offset = static_cast<size_t>(round % 5);
    auto* send = static_cast<float*>(buffers[static_cast<size_t>(round % 80)]->ptr) + offset;
    float* recv = round % 2 == 1 ? send + count : send;
    const int caseIndex = 6000 + round;
    upload(send, encode(inputOf(ctx.rank, caseIndex, count, weftFloat32, weftSum), weftFloat32));
    if (recv != send) upload(recv, std::vector<unsigned char>(count * 4, 0xA5));
    RANK_WEFT(ctx, weftAllReduce(send, recv, count, weftFloat32, weftSum, g.comm, g.stream(round)));
    g.sync(round);
    RANK_CHECK(ctx, readBack(recv, count * 4) == expectedOf(ctx.nranks, caseIndex, count, weftFloat32, weftSum),
               "round %d (count %zu, offset %zu, %s), seed %" PRIu64, round, count, offset,
               recv == send ? "in place" : "out of place", runSeed());
  }
  return 0;
}

// Rank 0's buffers come from the stream-ordered pool, which CUDA IPC cannot export, and then
// from an allocation under 2 MiB: every rank copies in instead, and the sums are right; the
// next call, on ordinary buffers, goes direct.
int unsharedBuffers(RankContext& ctx) {
  const size_t count = kPage / 4;  // 2 MiB of float32
  DeviceBuffer plain(count * 4), small(ctx.rank == 0 ? 4096 * 4 : kPage);
  GpuRank g(ctx);
  void* pooled = nullptr;
  void* buf = plain.ptr;
  if (ctx.rank == 0) {
    RANK_CHECK(ctx, gpuMallocAsync(&pooled, count * 4, g.stream(0)) == gpuSuccess, "pool allocation");
    RANK_CHECK(ctx, gpuStreamSynchronize(g.stream(0)) == gpuSuccess, "pool allocation");
    buf = pooled;
  }
  const auto mine = encode(inputOf(ctx.rank, 7000, count, weftFloat32, weftSum), weftFloat32);
  const auto expect = expectedOf(ctx.nranks, 7000, count, weftFloat32, weftSum);
  upload(buf, mine);
  RANK_WEFT(ctx, weftAllReduce(buf, buf, count, weftFloat32, weftSum, g.comm, g.stream(0)));
  g.sync(0);
  RANK_CHECK(ctx, readBack(buf, count * 4) == expect, "pool memory on rank 0, seed %" PRIu64, runSeed());
  const size_t smallCount = 4096;
  upload(small.ptr, encode(inputOf(ctx.rank, 7001, smallCount, weftFloat32, weftSum), weftFloat32));
  RANK_WEFT(ctx, weftAllReduce(small.ptr, small.ptr, smallCount, weftFloat32, weftSum, g.comm, g.stream(1)));
  g.sync(1);
  RANK_CHECK(ctx, readBack(small.ptr, smallCount * 4) == expectedOf(ctx.nranks, 7001, smallCount, weftFloat32, weftSum),
             "a small allocation on rank 0, seed %" PRIu64, runSeed());
  upload(plain.ptr, mine);
  RANK_WEFT(ctx, weftAllReduce(plain.ptr, plain.ptr, count, weftFloat32, weftSum, g.comm, g.stream(0)));
  g.sync(0);
  RANK_CHECK(ctx, plain.read() == expect, "ordinary buffers after unshared ones, seed %" PRIu64, runSeed());
  if (pooled != nullptr) (void)gpuFreeAsync(pooled, g.stream(0));
  return 0;
}

// Bad calls fail on every rank, before anything is queued, and the communicator goes on: the
// last rank's buffer is smaller than the call; then rank 0 all-reduces another count.
int badCalls(RankContext& ctx) {
  const size_t count = 2 * kPage / 4;  // 4 MiB of float32
  const bool last = ctx.rank == ctx.nranks - 1;
  DeviceBuffer buf(last ? kPage : 2 * kPage), big(2 * kPage);
  GpuRank g(ctx);
  weftResult_t rc = weftAllReduce(buf.ptr, buf.ptr, count, weftFloat32, weftSum, g.comm, g.stream(0));
  RANK_CHECK(ctx, rc == weftInvalidArgument, "a buffer smaller than the call: %s", weftGetErrorString(rc));
  RANK_CHECK(ctx, std::strstr(weftGetLastError(g.comm), last ? "fewer than" : "smaller than the call") != nullptr,
             "message: %s", weftGetLastError(g.comm));
  rc = weftAllReduce(big.ptr, big.ptr, ctx.rank == 0 ? count - 1 : count, weftFloat32, weftSum, g.comm, g.stream(0));
  RANK_CHECK(ctx, rc == weftInvalidUsage, "calls that differ: %s", weftGetErrorString(rc));
  RANK_CHECK(ctx, std::strstr(weftGetLastError(g.comm), "different all-reduce") != nullptr, "message: %s",
             weftGetLastError(g.comm));
  const auto expect = expectedOf(ctx.nranks, 7100, count, weftFloat32, weftSum);
  big.fill(encode(inputOf(ctx.rank, 7100, count, weftFloat32, weftSum), weftFloat32));
  RANK_WEFT(ctx, weftAllReduce(big.ptr, big.ptr, count, weftFloat32, weftSum, g.comm, g.stream(1)));
  g.sync(1);
  RANK_CHECK(ctx, big.read() == expect, "after the bad calls, seed %" PRIu64, runSeed());
  return 0;
}

void direct(int (*body)(RankContext&), std::vector<int> rankCounts) {
  setenv("WEFT_CUDA_IPC_DIRECT_MIN_BYTES", "0", 1);  // inherited by the ranks
  runOnRanks(body, std::move(rankCounts));
  unsetenv("WEFT_CUDA_IPC_DIRECT_MIN_BYTES");
}

}  // namespace

TEST_CASE("gpu direct: every type and operator, in and out of place", "[gpu]") { direct(everyTypeAndOp, {2, 3, 4, 8}); }
TEST_CASE("gpu direct: more buffers than stay mapped, sub-buffers, one allocation for both", "[gpu]") {
  direct(manyBuffers, {2, 3, 8});
}
TEST_CASE("gpu direct: a rank whose buffers cannot be shared sends every rank to copy-in", "[gpu]") {
  direct(unsharedBuffers, {2, 3});
}
TEST_CASE("gpu direct: bad calls fail on every rank, which can go on", "[gpu]") { direct(badCalls, {2, 4}); }
