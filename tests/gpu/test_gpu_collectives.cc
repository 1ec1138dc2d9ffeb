// Collectives on device buffers, as processes sharing GPU 0 (1, 2, 3, 4 and 8 ranks): every data
// type x operator against a host reference, with fresh random data each run (the seed is
// printed), poisoned outputs, odd counts, in-place calls, two streams and a group. All-reduce goes
// GPU to GPU over CUDA IPC (ranks on one host), and again staged through host memory; a rank
// killed with SIGKILL gives the others an error, on both IPC paths (copy-in, direct). Exits 77
// (ctest: skipped) with a message when no GPU is visible. test_gpu_ipc_direct.cc, in the same
// binary, tests the direct path.
#include <catch2/catch.hpp>

#include <dlfcn.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <random>
#include <vector>

#include "element_codec.h"
#include "gpu/gpu_ranks.h"

using namespace weft::test;

namespace {

const weftDataType_t kTypes[] = {weftInt8, weftUint8, weftInt32, weftUint32, weftInt64, weftUint64,
                                 weftFloat16, weftFloat32, weftFloat64, weftBfloat16, weftFloat8e4m3, weftFloat8e5m2};
const size_t kCounts[] = {1, 7, 4099, 65541};

// All-reduce (in and out of place), reduce and reduce-scatter for every type x op x count.
int reductions(RankContext& ctx) {
  GpuRank g(ctx);
  const int n = ctx.nranks;
  int k = 0;
  for (weftDataType_t t : kTypes) {
    for (int opIndex = 0; opIndex < 7; ++opIndex) {  // Sum..Avg, then PreMulSum host-immediate and device scalar
      const weftRedOp_t base = opIndex < 5 ? static_cast<weftRedOp_t>(opIndex) : weftSum;
      // Each rank scales its own input by its own scalar.
      const std::function<double(int)> scale = [opIndex, t](int r) {
        const double v = opIndex == 5 ? 2.0 + r : opIndex == 6 ? 3.0 + 2 * (r % 2) : 1.0;
        return isFloatType(t) ? rounded(v, t) : v;  // the scalar as the type holds it
      };
      weftRedOp_t op = base;
      std::vector<unsigned char> scalar(8);
      storeValue(scalar.data(), 0, t, scale(ctx.rank));
      DeviceBuffer deviceScalar(8);
      deviceScalar.fill(scalar);
      if (opIndex == 5) RANK_WEFT(ctx, weftRedOpCreatePreMulSum(&op, scalar.data(), t, weftScalarHostImmediate, g.comm));
      if (opIndex == 6) RANK_WEFT(ctx, weftRedOpCreatePreMulSum(&op, deviceScalar.ptr, t, weftScalarDevice, g.comm));
      for (size_t count : kCounts) {
        ++k;
        const size_t size = typeSize(t);
        std::vector<std::vector<double>> in;
        for (int r = 0; r < n; ++r) in.push_back(inputOf(r, k, count * static_cast<size_t>(n), t, base));
        const auto mine = encode(in[static_cast<size_t>(ctx.rank)], t);
        std::vector<unsigned char> expect(count * static_cast<size_t>(n) * size);
        for (size_t i = 0; i < count * static_cast<size_t>(n); ++i) reference(expect.data(), i, in, i, t, base, scale);
        const size_t bytes = count * size;
        DeviceBuffer send(bytes * static_cast<size_t>(n)), recv(bytes * static_cast<size_t>(n));
        const char* name = "";
        auto check = [&](const std::vector<unsigned char>& got, size_t expectAt, size_t len) {
          RANK_CHECK(ctx, std::memcmp(got.data(), expect.data() + expectAt, len) == 0,
                     "%s type %d op %d count %zu ranks %d seed %" PRIu64, name, t, opIndex, count, n, runSeed());
        };
        // All-reduce out of place on the first count elements, then in place.
        name = "all-reduce";
        send.fill(mine);
        recv.poison();
        RANK_WEFT(ctx, weftAllReduce(send.ptr, recv.ptr, count, t, op, g.comm, g.stream(k)));
        g.sync(k);
        check(recv.read(), 0, bytes);
        name = "all-reduce in place";
        RANK_WEFT(ctx, weftAllReduce(send.ptr, send.ptr, count, t, op, g.comm, g.stream(k + 1)));
        g.sync(k + 1);
        check(send.read(), 0, bytes);
        // Reduce to the last rank.
        name = "reduce";
        send.fill(mine);
        recv.poison();
        RANK_WEFT(ctx, weftReduce(send.ptr, recv.ptr, count, t, op, n - 1, g.comm, g.stream(k)));
        g.sync(k);
        if (ctx.rank == n - 1) check(recv.read(), 0, bytes);
        // Reduce-scatter of count elements per rank.
        name = "reduce-scatter";
        recv.poison();
        RANK_WEFT(ctx, weftReduceScatter(send.ptr, recv.ptr, count, t, op, g.comm, g.stream(k + 1)));
        g.sync(k + 1);
        check(recv.read(), static_cast<size_t>(ctx.rank) * bytes, bytes);
      }
      if (opIndex >= 5) RANK_WEFT(ctx, weftRedOpDestroy(op, g.comm));
    }
  }
  return 0;
}

// The data-moving collectives, with counts that do not divide evenly and in-place layouts.
int dataMovement(RankContext& ctx) {
  GpuRank g(ctx);
  const int n = ctx.nranks;
  const auto un = static_cast<size_t>(n);
  const weftDataType_t t = weftUint8;
  int k = 1000;
  for (size_t count : kCounts) {
    ++k;
    std::vector<std::vector<unsigned char>> data;
    for (int r = 0; r < n; ++r) data.push_back(encode(inputOf(r, k, count * un, weftUint64, weftSum), t));
    const auto& mine = data[static_cast<size_t>(ctx.rank)];
    DeviceBuffer send(count * un), recv(count * un);
    auto expectBlock = [&](const std::vector<unsigned char>& got, size_t at, const unsigned char* want, const char* what) {
      RANK_CHECK(ctx, std::memcmp(got.data() + at, want, count) == 0, "%s count %zu ranks %d", what, count, n);
    };
    // Broadcast from rank 0 (in place).
    send.fill(mine);
    RANK_WEFT(ctx, weftBcast(send.ptr, count, t, 0, g.comm, g.stream(k)));
    g.sync(k);
    expectBlock(send.read(), 0, data[0].data(), "broadcast");
    // All-gather in place: block r of recv is rank r's.
    recv.fill(mine);
    RANK_WEFT(ctx, weftAllGather(static_cast<char*>(recv.ptr) + count * static_cast<size_t>(ctx.rank), recv.ptr, count,
                                 t, g.comm, g.stream(k + 1)));
    g.sync(k + 1);
    for (int r = 0; r < n; ++r) expectBlock(recv.read(), count * static_cast<size_t>(r), data[static_cast<size_t>(r)].data() + count * static_cast<size_t>(r), "all-gather");
    // All-to-all: block r of mine goes to rank r.
    send.fill(mine);
    recv.poison();
    RANK_WEFT(ctx, weftAlltoAll(send.ptr, recv.ptr, count, t, g.comm, g.stream(k)));
    g.sync(k);
    for (int r = 0; r < n; ++r) {
      expectBlock(recv.read(), count * static_cast<size_t>(r),
                  data[static_cast<size_t>(r)].data() + count * static_cast<size_t>(ctx.rank), "all-to-all");
    }
    // Gather to and scatter from the last rank.
    recv.poison();
    RANK_WEFT(ctx, weftGather(send.ptr, recv.ptr, count, t, n - 1, g.comm, g.stream(k + 1)));
    g.sync(k + 1);
    for (int r = 0; ctx.rank == n - 1 && r < n; ++r) {
      expectBlock(recv.read(), count * static_cast<size_t>(r), data[static_cast<size_t>(r)].data(), "gather");
    }
    recv.poison();
    RANK_WEFT(ctx, weftScatter(send.ptr, recv.ptr, count, t, n - 1, g.comm, g.stream(k)));
    g.sync(k);
    expectBlock(recv.read(), 0, data[un - 1].data() + count * static_cast<size_t>(ctx.rank), "scatter");
    // A ring of sends and receives in one group.
    recv.poison();
    RANK_WEFT(ctx, weftGroupStart());
    RANK_WEFT(ctx, weftSend(send.ptr, count, t, (ctx.rank + 1) % n, g.comm, g.stream(k + 1)));
    RANK_WEFT(ctx, weftRecv(recv.ptr, count, t, (ctx.rank + n - 1) % n, g.comm, g.stream(k + 1)));
    RANK_WEFT(ctx, weftGroupEnd());
    g.sync(k + 1);
    expectBlock(recv.read(), 0, data[static_cast<size_t>((ctx.rank + n - 1) % n)].data(), "send/recv ring");
  }
  return 0;
}

// Mixed or foreign buffers and streams give errors, not crashes.
int badInput(RankContext& ctx) {
  GpuRank g(ctx);
  int bound = -1;
  RANK_WEFT(ctx, weftCommCuDevice(g.comm, &bound));
  RANK_CHECK(ctx, bound == 0, "the communicator is bound to GPU 0, the one current at init, not %d", bound);
  DeviceBuffer device(64);
  std::vector<unsigned char> host(64);
  RANK_CHECK(ctx, weftAllReduce(device.ptr, host.data(), 16, weftUint8, weftSum, g.comm, g.stream(0)) == weftInvalidArgument,
             "device send + host recv must be rejected");
  RANK_CHECK(ctx, std::strstr(weftGetLastError(g.comm), "both must be device memory") != nullptr, "message: %s",
             weftGetLastError(g.comm));
  weftStream_t hostStream = nullptr;
  RANK_WEFT(ctx, weftStreamCreate(&hostStream));
  RANK_CHECK(ctx, weftAllReduce(device.ptr, device.ptr, 16, weftUint8, weftSum, g.comm, hostStream) == weftInvalidArgument,
             "a Weft host stream with device buffers must be rejected");
  RANK_WEFT(ctx, weftStreamDestroy(hostStream));
  // The communicator still works afterwards.
  RANK_WEFT(ctx, weftAllReduce(device.ptr, device.ptr, 16, weftUint8, weftSum, g.comm, g.stream(0)));
  g.sync(0);
  return 0;
}

// A large all-reduce in many pieces (with 1 MiB IPC buffers): the two buffers alternate.
int allReduceInPieces(RankContext& ctx) {
  GpuRank g(ctx);
  const size_t count = (size_t{9} << 20) / 4 + 3;  // 9 MiB of float32 and a bit
  std::vector<std::vector<double>> in;
  for (int r = 0; r < ctx.nranks; ++r) in.push_back(inputOf(r, 5000, count, weftFloat32, weftSum));
  std::vector<unsigned char> expect(count * 4);
  for (size_t i = 0; i < count; ++i) reference(expect.data(), i, in, i, weftFloat32, weftSum, [](int) { return 1.0; });
  DeviceBuffer buf(count * 4), other(count * 4);
  for (int k = 0; k < 3; ++k) {  // in place, on alternating streams
    buf.fill(encode(in[static_cast<size_t>(ctx.rank)], weftFloat32));
    RANK_WEFT(ctx, weftAllReduce(buf.ptr, buf.ptr, count, weftFloat32, weftSum, g.comm, g.stream(k)));
    g.sync(k);
    RANK_CHECK(ctx, buf.read() == expect, "9 MiB all-reduce, round %d, seed %" PRIu64, k, runSeed());
  }
  // Back to back on two streams with no synchronization between them.
  buf.fill(encode(in[static_cast<size_t>(ctx.rank)], weftFloat32));
  other.fill(encode(in[static_cast<size_t>(ctx.rank)], weftFloat32));
  RANK_WEFT(ctx, weftAllReduce(buf.ptr, buf.ptr, count, weftFloat32, weftSum, g.comm, g.stream(0)));
  RANK_WEFT(ctx, weftAllReduce(other.ptr, other.ptr, count, weftFloat32, weftSum, g.comm, g.stream(1)));
  g.sync(0);
  g.sync(1);
  RANK_CHECK(ctx, buf.read() == expect && other.read() == expect, "two streams, seed %" PRIu64, runSeed());
  return 0;
}

int manyPieces(RankContext& ctx) {
  setenv("WEFT_CUDA_IPC_BUFFER_BYTES", "1048576", 1);
  return allReduceInPieces(ctx);
}

// The last rank makes larger IPC buffers: every rank must cut pieces of the smallest size, or
// it reads past a peer's mapping.
int unevenIpcBuffers(RankContext& ctx) {
  setenv("WEFT_CUDA_IPC_BUFFER_BYTES", ctx.rank == ctx.nranks - 1 ? "2097152" : "1048576", 1);
  return allReduceInPieces(ctx);
}

// A size the last rank cannot parse turns IPC off on every rank, together: the all-reduces
// are staged, and still right.
int badIpcBufferSize(RankContext& ctx) {
  setenv("WEFT_CUDA_IPC_BUFFER_BYTES", ctx.rank == ctx.nranks - 1 ? "lots" : "1048576", 1);
  return allReduceInPieces(ctx);
}

// The last rank dies (SIGKILL) after one all-reduce; the others' next one ends with an error
// within the timeout, and their streams complete. Three more queued behind it, before it failed,
// fail with it: none of their kernels runs (their outputs keep the poison), so none reads a dead
// peer's memory.
int killedPeer(RankContext& ctx) {
  constexpr int kTimeoutMs = 5000;
  constexpr size_t kCount = 1024;
  DeviceBuffer buf(size_t{2} << 20);  // what the direct path shares; it outlives the communicator
  std::vector<std::unique_ptr<DeviceBuffer>> later;
  for (int k = 0; k < 3; ++k) {  // filled now: a fill synchronizes the device
    later.push_back(std::make_unique<DeviceBuffer>(kCount * 4));
    later.back()->poison();
  }
  GpuRank g(ctx, kTimeoutMs);
  RANK_WEFT(ctx, weftAllReduce(buf.ptr, buf.ptr, kCount, weftFloat32, weftSum, g.comm, g.stream(0)));
  g.sync(0);
  if (ctx.rank == ctx.nranks - 1) raise(SIGKILL);
  const auto start = std::chrono::steady_clock::now();
  // The copy-in path fails on the stream (an asynchronous error); the direct path already while
  // the ranks swap where their buffers are.
  const weftResult_t rc = weftAllReduce(buf.ptr, buf.ptr, kCount, weftFloat32, weftSum, g.comm, g.stream(1));
  for (auto& out : later) (void)weftAllReduce(buf.ptr, out->ptr, kCount, weftFloat32, weftSum, g.comm, g.stream(1));
  RANK_CHECK(ctx, gpuStreamSynchronize(g.stream(1)) == gpuSuccess, "the stream completes");
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
  weftResult_t async = weftSuccess;
  RANK_WEFT(ctx, weftCommGetAsyncError(g.comm, &async));
  RANK_CHECK(ctx, rc != weftSuccess || async != weftSuccess, "an error after the peer died");
  RANK_CHECK(ctx, waited.count() < 3 * kTimeoutMs, "error after %lld ms", static_cast<long long>(waited.count()));
  for (size_t k = 0; k < later.size(); ++k) {
    const auto bytes = later[k]->read();
    RANK_CHECK(ctx, std::all_of(bytes.begin(), bytes.end(), [](unsigned char b) { return b == 0xA5; }),
               "the all-reduce queued %zu after the failed one wrote its output", k + 1);
  }
  return 0;
}

}  // namespace

TEST_CASE("gpu: reductions on device buffers match a host reference", "[gpu]") { runOnRanks(reductions); }
TEST_CASE("gpu: reductions staged through host memory (WEFT_CUDA_IPC=0)", "[gpu]") {
  setenv("WEFT_CUDA_IPC", "0", 1);  // inherited by the ranks
  runOnRanks(reductions, {2, 3});
  unsetenv("WEFT_CUDA_IPC");
}
TEST_CASE("gpu: a large all-reduce over CUDA IPC in many pieces", "[gpu]") { runOnRanks(manyPieces, {2, 4}); }
TEST_CASE("gpu: ranks with different IPC buffer sizes use the smallest", "[gpu]") {
  runOnRanks(unevenIpcBuffers, {2, 3});
}
TEST_CASE("gpu: a bad IPC buffer size on one rank turns IPC off on all", "[gpu]") {
  runOnRanks(badIpcBufferSize, {2, 3});
}
TEST_CASE("gpu: data-moving collectives on device buffers", "[gpu]") { runOnRanks(dataMovement); }
TEST_CASE("gpu: mixed buffers and host streams are rejected", "[gpu]") { runOnRanks(badInput); }
TEST_CASE("gpu: a rank killed with SIGKILL gives the others an error", "[gpu]") {
  skipWithoutGpu();
  for (const char* minBytes : std::initializer_list<const char*>{"0", nullptr}) {  // direct, copy-in (default)
    INFO("WEFT_CUDA_IPC_DIRECT_MIN_BYTES=" << (minBytes ? minBytes : "(unset)"));
    if (minBytes != nullptr) setenv("WEFT_CUDA_IPC_DIRECT_MIN_BYTES", minBytes, 1);
    auto outcomes = runRanks(3, killedPeer, LaunchOptions{true, 120000});
    for (int r = 0; r < 2; ++r) CHECK(outcomes[static_cast<size_t>(r)].exitCode == 0);
    CHECK(outcomes[2].signal == SIGKILL);
    unsetenv("WEFT_CUDA_IPC_DIRECT_MIN_BYTES");
    if (outcomes[0].exitCode != 0 || outcomes[1].exitCode != 0) FAIL(describeFailures(outcomes));
  }
}
