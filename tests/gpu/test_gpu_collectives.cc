// Collectives on device buffers, as processes sharing GPU 0 (1, 2, 3, 4 and 8 ranks): every data
// type x operator against a host reference, with fresh random data each run (the seed is
// printed), poisoned outputs, odd counts, in-place calls, two streams and a group. All-reduce goes
// GPU to GPU over CUDA IPC (ranks on one host), and again staged through host memory; a rank
// killed with SIGKILL gives the others an error. Exits 77 (ctest: skipped) with a message when no
// GPU is visible.
#include <catch2/catch.hpp>

#include <dlfcn.h>
#include <signal.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "element_codec.h"
#include "kernels/gpu/gpu_runtime.h"
#include "multiprocess.h"

using namespace weft::test;

namespace {

constexpr int kNoGpu = 77;

// Asked in a child: a parent that touched the runtime could not fork working ranks. Skipped
// only where there is no GPU (no driver, or no device); a driver too old for this runtime, or
// any other error, fails loudly instead of skipping.
int probeGpu(RankContext&) {
#if !defined(WEFT_GPU_HIP)
  if (dlopen("libcuda.so.1", RTLD_NOW) == nullptr) return kNoGpu;
#endif
  int count = 0;
  const gpuError_t err = gpuGetDeviceCount(&count);
  if (err == gpuErrorNoDevice || (err == gpuSuccess && count == 0)) return kNoGpu;
  if (err != gpuSuccess) {
    std::fprintf(stderr, "the GPU runtime fails: %s\n", gpuGetErrorString(err));
    return 1;
  }
  return 0;
}

void skipWithoutGpu() {
  auto outcome = runRanks(1, probeGpu, LaunchOptions{false, 60000});
  if (outcome.at(0).exitCode == 0) return;
  if (outcome.at(0).exitCode != kNoGpu) FAIL("GPU present but unusable: " << outcome.at(0).output);
  std::printf("SKIPPED: no GPU visible to this process (the GPU tests need CUDA or HIP hardware)\n");
  std::fflush(stdout);
  std::_Exit(kNoGpu);
}

uint64_t runSeed() {
  static const uint64_t seed = std::random_device{}();
  return seed;
}

// Small integers, so that every format holds every input, partial sum and product exactly.
double randomValue(std::mt19937_64& rng, weftDataType_t t, weftRedOp_t op) {
  const bool isSigned = isSignedType(t) || isFloatType(t);
  auto pick = [&](int lo, int hi) { return static_cast<double>(std::uniform_int_distribution<int>(lo, hi)(rng)); };
  if (!isFloatType(t) && (op == weftSum || op == weftMax || op == weftMin)) {  // full width: wraps and extremes
    return static_cast<double>(static_cast<int64_t>(rng() >> (isSigned ? 12 : 11)) * (isSigned && rng() % 2 ? -1 : 1));
  }
  if (op == weftProd) return isSigned ? pick(-2, 2) : pick(0, 2);
  if (op == weftMax || op == weftMin) return isSigned ? pick(-8, 8) : pick(0, 8);
  return isSigned ? pick(-2, 2) : pick(0, 3);
}

// Rank r's input for a case: the same on every rank, so each can compute the reference.
std::vector<double> inputOf(int rank, int caseIndex, size_t count, weftDataType_t t, weftRedOp_t op) {
  std::mt19937_64 rng(runSeed() * 1000003 + static_cast<uint64_t>(caseIndex) * 64 + static_cast<uint64_t>(rank));
  std::vector<double> values(count);
  for (double& v : values) v = randomValue(rng, t, op);
  return values;
}

std::vector<unsigned char> encode(const std::vector<double>& values, weftDataType_t t) {
  std::vector<unsigned char> bytes(values.size() * typeSize(t));
  for (size_t i = 0; i < values.size(); ++i) storeValue(bytes.data(), i, t, values[i]);
  return bytes;
}

// The reduction of every rank's element i (scaled by `scale` first), encoded in t.
// The value x * scale as type t holds it (PreMulSum rounds each scaled input).
double rounded(double x, weftDataType_t t) {
  unsigned char bytes[8];
  storeValue(bytes, 0, t, x);
  return loadFloat(bytes, 0, t);
}

// scale(r): rank r's PreMulSum scalar (1 without PreMulSum).
void reference(void* out, size_t at, const std::vector<std::vector<double>>& in, size_t i, weftDataType_t t,
               weftRedOp_t op, const std::function<double(int)>& scale) {
  const int n = static_cast<int>(in.size());
  if (isFloatType(t)) {
    double acc = rounded(in[0][i] * scale(0), t);
    for (int r = 1; r < n; ++r) {
      const double v = rounded(in[static_cast<size_t>(r)][i] * scale(r), t);
      acc = op == weftProd ? acc * v : op == weftMax ? std::max(acc, v) : op == weftMin ? std::min(acc, v) : acc + v;
    }
    if (op == weftAvg) acc = t == weftFloat64 ? acc / n : static_cast<double>(static_cast<float>(acc) / static_cast<float>(n));
    storeValue(out, at, t, acc);
    return;
  }
  const uint64_t mask = widthMask(t);
  const int bits = static_cast<int>(8 * typeSize(t));
  auto signedOf = [&](uint64_t x) { return bits == 64 ? static_cast<int64_t>(x) : static_cast<int64_t>(x << (64 - bits)) >> (64 - bits); };
  auto raw = [&](size_t r) {
    return static_cast<uint64_t>(static_cast<int64_t>(in[r][i])) * static_cast<uint64_t>(scale(static_cast<int>(r))) & mask;
  };
  uint64_t acc = raw(0);
  for (size_t r = 1; r < in.size(); ++r) {
    const uint64_t v = raw(r);
    if (op == weftProd) acc = acc * v & mask;
    else if (op == weftMax) acc = isSignedType(t) ? (signedOf(v) > signedOf(acc) ? v : acc) : std::max(acc, v);
    else if (op == weftMin) acc = isSignedType(t) ? (signedOf(v) < signedOf(acc) ? v : acc) : std::min(acc, v);
    else acc = (acc + v) & mask;
  }
  if (op == weftAvg) acc = isSignedType(t) ? static_cast<uint64_t>(signedOf(acc) / n) & mask : acc / static_cast<uint64_t>(n);
  std::memcpy(static_cast<char*>(out) + at * typeSize(t), &acc, typeSize(t));
}

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

struct GpuRank {
  explicit GpuRank(RankContext& c, int timeoutMs = 0) : ctx(c) {
    RANK_CHECK(ctx, gpuSetDevice(0) == gpuSuccess, "cudaSetDevice(0)");
    for (auto& s : streams) RANK_CHECK(ctx, gpuStreamCreateWithFlags(&s, gpuStreamNonBlocking) == gpuSuccess, "stream");
    weftConfig_t config = WEFT_CONFIG_INITIALIZER;
    if (timeoutMs > 0) config.timeoutMs = timeoutMs;
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
// within the timeout, and their streams complete.
int killedPeer(RankContext& ctx) {
  constexpr int kTimeoutMs = 5000;
  GpuRank g(ctx, kTimeoutMs);
  DeviceBuffer buf(4096);
  RANK_WEFT(ctx, weftAllReduce(buf.ptr, buf.ptr, 1024, weftFloat32, weftSum, g.comm, g.stream(0)));
  g.sync(0);
  if (ctx.rank == ctx.nranks - 1) raise(SIGKILL);
  const auto start = std::chrono::steady_clock::now();
  RANK_WEFT(ctx, weftAllReduce(buf.ptr, buf.ptr, 1024, weftFloat32, weftSum, g.comm, g.stream(1)));
  RANK_CHECK(ctx, gpuStreamSynchronize(g.stream(1)) == gpuSuccess, "the stream completes");
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
  weftResult_t async = weftSuccess;
  RANK_WEFT(ctx, weftCommGetAsyncError(g.comm, &async));
  RANK_CHECK(ctx, async != weftSuccess, "an error after the peer died");
  RANK_CHECK(ctx, waited.count() < 3 * kTimeoutMs, "error after %lld ms", static_cast<long long>(waited.count()));
  return 0;
}

void runOnRanks(int (*body)(RankContext&), std::vector<int> rankCounts = {1, 2, 3, 4, 8}) {
  skipWithoutGpu();
  for (int n : rankCounts) {
    INFO("ranks: " << n << ", seed " << runSeed());
    auto outcomes = runRanks(n, [body](RankContext& ctx) { return body(ctx); }, LaunchOptions{true, 600000});
    CHECK(describeFailures(outcomes).empty());
    if (!describeFailures(outcomes).empty()) FAIL(describeFailures(outcomes));
  }
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
  auto outcomes = runRanks(3, killedPeer, LaunchOptions{true, 120000});
  for (int r = 0; r < 2; ++r) CHECK(outcomes[static_cast<size_t>(r)].exitCode == 0);
  CHECK(outcomes[2].signal == SIGKILL);
  if (outcomes[0].exitCode != 0 || outcomes[1].exitCode != 0) FAIL(describeFailures(outcomes));
}
