// nccl-bench: NCCL's all-reduce (float32 sum) on device buffers, beside `weft-perf --gpu`, in
// weft-perf's table and JSON format (tools/weft-perf/perf_common.cc). Ranks come from the
// launcher's environment like weft-perf's; a host-memory Weft communicator hands out NCCL's
// unique id. Each local rank takes GPU local_rank % visible GPUs, so several ranks share a GPU
// when there are fewer GPUs than ranks, which NCCL allows only from 2.30 with
// NCCL_MULTI_RANK_GPU_ENABLE=1 (tools/gpu-check sets it there); the version is printed.
//
//   weftrun -n N nccl-bench [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] [-c 0|1] [-J FILE]
#include <getopt.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/gpu/gpu_runtime.h"
#include "weft-perf/perf_common.h"
#include "weft/weft.h"

namespace {

using weftperf::kExitFailure;
using weftperf::kExitOk;

void die(const std::string& what) {
  std::fprintf(stderr, "nccl-bench: %s\n", what.c_str());
  std::exit(kExitFailure);
}
void checkNccl(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) die(std::string(what) + ": " + ncclGetErrorString(r));
}
void checkGpu(gpuError_t e, const char* what) {
  if (e != gpuSuccess) die(std::string(what) + ": " + gpuGetErrorString(e));
}
void checkWeft(weftResult_t r, weftComm_t comm, const char* what) {
  if (r != weftSuccess) die(std::string(what) + ": " + weftGetErrorString(r) + ": " + weftGetLastError(comm));
}

int localRank() {
  for (const char* name : {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}) {
    if (const char* value = std::getenv(name)) return std::atoi(value);
  }
  return 0;
}

void printUsage() {
  std::printf("usage: nccl-bench [-b MIN] [-e MAX] [-f FACTOR | -i STEP] [-n ITERS] [-w WARMUP] [-c 0|1] [-J FILE]\n");
}

}  // namespace

int main(int argc, char** argv) {
  weftperf::CommonOptions options;
  static const std::string kShort = weftperf::shortOptions("h");
  static const std::vector<option> kLong = weftperf::longOptions({{"help", no_argument, nullptr, 'h'}});
  const int status = weftperf::readOptions(argc, argv, "nccl-bench", kShort, kLong.data(), &options, printUsage,
                                           [](int, const std::string&) { return -1; });
  if (status >= 0) return status;
  if (optind < argc) return weftperf::usageError("nccl-bench", "unexpected argument '%s'", argv[optind]);
  if (std::string error; !weftperf::finishCommonOptions(&options, &error)) {
    return weftperf::usageError("nccl-bench", "%s", error.c_str());
  }

  int devices = 0;
  checkGpu(gpuGetDeviceCount(&devices), "cudaGetDeviceCount");
  if (devices == 0) die("no GPU visible");
  checkGpu(gpuSetDevice(localRank() % devices), "cudaSetDevice");

  weftComm_t weft = nullptr;
  checkWeft(weftCommInitFromEnv(&weft), nullptr, "weftCommInitFromEnv");
  int rank = 0, nranks = 0;
  checkWeft(weftCommUserRank(weft, &rank), weft, "weftCommUserRank");
  checkWeft(weftCommCount(weft, &nranks), weft, "weftCommCount");
  ncclUniqueId id;
  if (rank == 0) checkNccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  checkWeft(weftBcast(&id, sizeof id, weftUint8, 0, weft, nullptr), weft, "weftBcast");
  ncclComm_t comm;
  checkNccl(ncclCommInitRank(&comm, nranks, id, rank), "ncclCommInitRank");
  int version = 0;
  ncclGetVersion(&version);

  gpuStream_t stream;
  checkGpu(gpuStreamCreateWithFlags(&stream, gpuStreamNonBlocking), "stream");
  const size_t maxCount = options.sweep.maxBytes / sizeof(float);
  float *send = nullptr, *recv = nullptr;
  checkGpu(gpuMalloc(reinterpret_cast<void**>(&send), maxCount * sizeof(float) + 16), "malloc");
  checkGpu(gpuMalloc(reinterpret_cast<void**>(&recv), maxCount * sizeof(float) + 16), "malloc");
  std::vector<float> host(maxCount);
  for (size_t i = 0; i < maxCount; ++i) host[i] = static_cast<float>((static_cast<size_t>(rank) + i) % 7);
  checkGpu(gpuMemcpy(send, host.data(), maxCount * sizeof(float), gpuMemcpyHostToDevice), "copy");

  auto maxOverRanks = [&](double v) {
    checkWeft(weftAllReduce(&v, &v, 1, weftFloat64, weftMax, weft, nullptr), weft, "weftAllReduce");
    return v;
  };
  if (rank == 0) {
    std::printf("# nccl-bench allreduce: NCCL %d, %d ranks on %d visible GPUs\n", version, nranks, devices);
    weftperf::printColumnHeader(stdout);
  }
  std::vector<weftperf::Row> rows;
  for (size_t bytes : options.sweep.sizes()) {
    const size_t count = bytes / sizeof(float);
    if (count == 0) continue;
    weftperf::Row row = weftperf::floatSumAllReduceRow(count, nranks);
    for (int inPlace = 0; inPlace < 2; ++inPlace) {
      float* out = inPlace ? send : recv;
      auto run = [&] { checkNccl(ncclAllReduce(send, out, count, ncclFloat, ncclSum, comm, stream), "ncclAllReduce"); };
      for (long i = 0; i < options.warmupIters; ++i) run();
      checkGpu(gpuStreamSynchronize(stream), "sync");
      checkWeft(weftBarrier(weft, nullptr), weft, "weftBarrier");
      const auto start = std::chrono::steady_clock::now();
      for (long i = 0; i < options.iters; ++i) run();
      checkGpu(gpuStreamSynchronize(stream), "sync");
      const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
      long long wrong = -1;
      if (options.check && !inPlace) {  // one checked run: every rank's pattern summed
        checkGpu(gpuMemcpy(send, host.data(), count * sizeof(float), gpuMemcpyHostToDevice), "copy");
        run();
        checkGpu(gpuStreamSynchronize(stream), "sync");
        std::vector<float> got(count);
        checkGpu(gpuMemcpy(got.data(), recv, count * sizeof(float), gpuMemcpyDeviceToHost), "copy");
        long long bad = 0;
        for (size_t i = 0; i < count; ++i) {
          float want = 0;
          for (int r = 0; r < nranks; ++r) want += static_cast<float>((static_cast<size_t>(r) + i) % 7);
          bad += got[i] != want;
        }
        checkWeft(weftAllReduce(&bad, &bad, 1, weftInt64, weftSum, weft, nullptr), weft, "weftAllReduce");
        wrong = bad;
      }
      const auto m = weftperf::allReduceMeasurement(row.bytes, nranks, maxOverRanks(us / static_cast<double>(options.iters)), wrong);
      (inPlace ? row.ip : row.oop) = m;
    }
    // In place leaves sums in send: restore the pattern for the next size.
    checkGpu(gpuMemcpy(send, host.data(), maxCount * sizeof(float), gpuMemcpyHostToDevice), "copy");
    rows.push_back(row);
    if (rank == 0) weftperf::printRow(stdout, row);
  }
  if (rank == 0) {
    weftperf::printFooter(stdout, 0, options.check, weftperf::averageBusBw(rows));
    if (std::string error; !options.jsonPath.empty() && !weftperf::writeJson(options.jsonPath, rows, &error)) die(error);
  }
  ncclCommDestroy(comm);
  weftCommDestroy(weft);
  return kExitOk;
}
