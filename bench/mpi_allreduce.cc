// mpi-allreduce-bench: the Open MPI side of `bench/compare --peer mpi`. Times MPI_Allreduce
// (MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) and prints the same nccl-tests-style rows and JSON as
// weft-perf and gloo-allreduce-bench (tools/weft-perf/perf_common.cc).
//
// What is measured: whatever the MPI library does for MPI_Allreduce with the run's settings
// (Open MPI 4.1 on one host: coll/tuned's decision rules over the vader shared-memory BTL).
// Both columns are real runs: out-of-place passes separate send and receive buffers; in-place
// passes MPI_IN_PLACE and the receive buffer. Before each timed loop the ranks meet at an
// MPI_Barrier; the time per iteration is the maximum over ranks. The data check (-c 1) is
// gloo-allreduce-bench's: small integers whose sums are exact in float32, a poisoned guard
// after the output, and a count of wrong elements and stray guard words summed over ranks.
//
// Start it with mpirun (mpirun --allow-run-as-root --oversubscribe -np N mpi-allreduce-bench
// ...); rank 0 prints.
// The C API only: keep Open MPI's and MPICH's deprecated C++ bindings out (they need libmpi_cxx).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <getopt.h>
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "weft-perf/perf_common.h"

namespace {

using weftperf::kExitFailure;
using weftperf::kExitOk;
using weftperf::kExitUsage;

constexpr size_t kGuardBytes = 4096;    // poisoned bytes after the output, checked after each check
constexpr unsigned char kPoison = 0xA5;  // 0xA5A5A5A5 is no sum of small integers
constexpr int kHostSlotBytes = 256;

using Options = weftperf::CommonOptions;

void printUsage() {
  std::printf(
      "Usage: mpi-allreduce-bench [options]\n"
      "Times MPI_Allreduce (MPI_FLOAT, MPI_SUM) and prints an nccl-tests-style table like\n"
      "weft-perf's. Start it with mpirun (mpirun -np N mpi-allreduce-bench ...); rank 0 prints.\n"
      "\n"
      "  -b, --minbytes SIZE     smallest message (default 8)\n"
      "  -e, --maxbytes SIZE     largest message (default 128M)\n"
      "  -f, --stepfactor N      multiply the size by N each step (default 2);\n"
      "                          0 or 1 steps by -i instead\n"
      "  -i, --stepbytes SIZE    add SIZE each step (default 1M); used when -f is 0 or 1,\n"
      "                          or when -i is given without -f\n"
      "  -n, --iters N           timed iterations per size and placement (default 20)\n"
      "  -w, --warmup_iters N    untimed iterations before each timing (default 5)\n"
      "  -c, --check 0|1         check the results (default 1)\n"
      "  -J, --json FILE         also write the rows to FILE as a JSON array (weft-perf's schema)\n"
      "  -h, --help              print this help\n"
      "\n"
      "SIZE takes an optional K, M or G suffix (powers of 1024) and is rounded down to a\n"
      "multiple of 4 bytes. Time is per iteration, the maximum over ranks; algbw = size / time,\n"
      "busbw = algbw * 2(n-1)/n (GB/s). Exit status: 0 success, 1 failure, 2 bad command line.\n");
}

constexpr const char* kTool = "mpi-allreduce-bench";

// Returns kExitOk after --help, kExitUsage for a bad command line, or -1 to go on. Runs before
// MPI_Init; every rank parses the same arguments, so all of them return the same way.
int parseArgs(int argc, char** argv, Options* options) {
  static const std::string kShortOptions = weftperf::shortOptions("h");
  static const std::vector<option> kLongOptions = weftperf::longOptions({
      {"help", no_argument, nullptr, 'h'},
  });
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, kShortOptions.c_str(), kLongOptions.data(), nullptr)) != -1) {
    const std::string arg = optarg != nullptr ? optarg : "";
    std::string error;
    const int common = weftperf::parseCommonOption(c, arg, options, &error);
    if (common < 0) return weftperf::usageError(kTool, "%s", error.c_str());
    if (common > 0) continue;
    switch (c) {
      case 'h':
        if (!weftperf::launcherSaysNotRankZero()) printUsage();
        return kExitOk;
      case ':':
        return weftperf::usageError(kTool, "option %s needs a value", argv[optind - 1]);
      default:
        if (optopt != 0) return weftperf::usageError(kTool, "unknown option -%c", optopt);
        return weftperf::usageError(kTool, "unknown option %s", argv[optind - 1]);
    }
  }
  if (optind < argc) return weftperf::usageError(kTool, "unexpected argument '%s'", argv[optind]);
  if (std::string error; !weftperf::finishCommonOptions(options, &error)) {
    return weftperf::usageError(kTool, "%s", error.c_str());
  }
  return -1;
}

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<float[], FreeDeleter>;

Buffer allocateFloats(size_t bytes) {
  constexpr size_t kAlign = 4096;
  void* p = std::aligned_alloc(kAlign, (bytes / kAlign + 1) * kAlign);
  if (p == nullptr) throw std::bad_alloc();
  return Buffer(static_cast<float*>(p));
}

// This rank's contribution at element i, and the sum over ranks: small integers, so every
// partial sum is exact in float32 whatever order the library adds them in.
float checkValue(int rank, size_t i) { return static_cast<float>((i * 3 + rank * 5) % 7) - 3.0f; }

class MpiBench {
 public:
  MpiBench(int rank, int nranks, const Options& options)
      : rank_(rank), nranks_(nranks), options_(options) {}

  int run();

 private:
  void allreduce(size_t count, bool inPlace) {
    MPI_Allreduce(inPlace ? MPI_IN_PLACE : send_.get(), recv_.get(), static_cast<int>(count),
                  MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
  long long sumOverRanks(long long value) {
    MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    return value;
  }
  void printPreamble();
  weftperf::Measurement measure(size_t count, bool inPlace);
  long long checkedRun(size_t count, bool inPlace);

  int rank_;
  int nranks_;
  const Options& options_;
  Buffer send_;
  Buffer recv_;
  long long outOfBounds_ = 0;
  bool checkFailed_ = false;
};

void MpiBench::printPreamble() {
  // Pid and host of every rank, gathered to rank 0.
  std::vector<char> mine(kHostSlotBytes, 0);
  const int64_t pid = getpid();
  std::memcpy(mine.data(), &pid, sizeof pid);
  char* host = mine.data() + sizeof pid;
  if (gethostname(host, kHostSlotBytes - sizeof pid - 1) != 0) std::strcpy(host, "?");
  std::vector<char> slots(static_cast<size_t>(nranks_) * kHostSlotBytes, 0);
  MPI_Gather(mine.data(), kHostSlotBytes, MPI_CHAR, slots.data(), kHostSlotBytes, MPI_CHAR, 0,
             MPI_COMM_WORLD);
  if (rank_ != 0) return;

  char library[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(library, &length);
  std::string version(library, static_cast<size_t>(length));
  if (const size_t end = version.find_first_of(",\n"); end != std::string::npos) {
    version.resize(end);  // "Open MPI v4.1.4, package: ..." -> "Open MPI v4.1.4"
  }
  const weftperf::Sweep& sweep = options_.sweep;
  std::printf("# mpi-allreduce-bench: %s MPI_Allreduce (MPI_FLOAT, MPI_SUM), %d ranks\n",
              version.c_str(), nranks_);
  std::printf("# minBytes %zu maxBytes %zu step: %s warmup iters: %ld iters: %ld validation: %d\n",
              sweep.minBytes, sweep.maxBytes, sweep.describeStep().c_str(), options_.warmupIters,
              options_.iters, options_.check ? 1 : 0);
  std::printf("#\n# Using ranks:\n");
  for (int r = 0; r < nranks_; ++r) {
    char* slot = slots.data() + static_cast<size_t>(r) * kHostSlotBytes;
    int64_t rankPid = 0;
    std::memcpy(&rankPid, slot, sizeof rankPid);
    slot[kHostSlotBytes - 1] = 0;
    std::printf("#  Rank %2d Pid %6lld on %10s\n", r, static_cast<long long>(rankPid),
                slot + sizeof rankPid);
  }
  std::printf("#\n");
}

int MpiBench::run() {
  const size_t maxBytes = options_.sweep.maxBytes;
  send_ = allocateFloats(maxBytes);
  recv_ = allocateFloats(maxBytes + kGuardBytes);
  const size_t maxCount = maxBytes / sizeof(float);
  for (size_t i = 0; i < maxCount; ++i) send_[i] = checkValue(rank_, i);
  std::memset(recv_.get(), 0, maxBytes + kGuardBytes);  // touch the pages before timing

  printPreamble();
  if (rank_ == 0) weftperf::printColumnHeader(stdout);
  std::vector<weftperf::Row> rows;
  for (size_t size : options_.sweep.sizes()) {
    const size_t count = size / sizeof(float);
    if (count == 0) {
      if (rank_ == 0) std::printf("# %zu B skipped: less than one float\n", size);
      continue;
    }
    weftperf::Row row;
    row.collective = "allreduce";
    row.bytes = count * sizeof(float);
    row.count = count;
    row.type = "float";
    row.redop = "sum";
    row.root = -1;
    row.nranks = nranks_;
    row.oop = measure(count, false);
    row.ip = measure(count, true);
    rows.push_back(row);
    if (rank_ == 0) weftperf::printRow(stdout, row);
  }
  if (rank_ != 0) return checkFailed_ ? kExitFailure : kExitOk;

  weftperf::printFooter(stdout, outOfBounds_, options_.check, weftperf::averageBusBw(rows));
  int status = kExitOk;
  if (checkFailed_) {
    std::fprintf(stderr, "mpi-allreduce-bench: data check FAILED\n");
    status = kExitFailure;
  }
  std::string error;
  if (!options_.jsonPath.empty() && !weftperf::writeJson(options_.jsonPath, rows, &error)) {
    std::fprintf(stderr, "mpi-allreduce-bench: %s\n", error.c_str());
    status = kExitFailure;
  }
  return status;
}

weftperf::Measurement MpiBench::measure(size_t count, bool inPlace) {
  if (inPlace) std::memcpy(recv_.get(), send_.get(), count * sizeof(float));
  for (long i = 0; i < options_.warmupIters; ++i) allreduce(count, inPlace);
  MPI_Barrier(MPI_COMM_WORLD);
  const auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < options_.iters; ++i) allreduce(count, inPlace);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  double us = std::chrono::duration<double, std::micro>(elapsed).count() /
              static_cast<double>(options_.iters);
  MPI_Allreduce(MPI_IN_PLACE, &us, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);

  const long long wrong = options_.check ? checkedRun(count, inPlace) : -1;
  return weftperf::allReduceMeasurement(count * sizeof(float), nranks_, us, wrong);
}

long long MpiBench::checkedRun(size_t count, bool inPlace) {
  const size_t bytes = count * sizeof(float);
  float* recv = recv_.get();
  unsigned char* raw = reinterpret_cast<unsigned char*>(recv);
  if (inPlace) {
    std::memcpy(recv, send_.get(), bytes);
    std::memset(raw + bytes, kPoison, kGuardBytes);
  } else {
    std::memset(raw, kPoison, bytes + kGuardBytes);
  }
  allreduce(count, inPlace);

  long long wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    float want = 0.0f;
    for (int r = 0; r < nranks_; ++r) want += checkValue(r, i);
    if (recv[i] != want) ++wrong;
  }
  long long stray = 0;
  for (size_t offset = 0; offset < kGuardBytes; offset += sizeof(float)) {
    if (std::memcmp(raw + bytes + offset, "\xA5\xA5\xA5\xA5", sizeof(float)) != 0) ++stray;
  }
  wrong = sumOverRanks(wrong);
  stray = sumOverRanks(stray);
  outOfBounds_ += stray;
  if (wrong != 0 || stray != 0) checkFailed_ = true;
  return wrong;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (const int status = parseArgs(argc, argv, &options); status >= 0) return status;
  if (options.sweep.maxBytes / sizeof(float) > static_cast<size_t>(INT32_MAX)) {
    return weftperf::usageError(kTool, "-e: MPI counts are ints; at most %zu bytes", size_t{INT32_MAX} * 4);
  }

  MPI_Init(&argc, &argv);  // MPI_ERRORS_ARE_FATAL: a failing call aborts the whole job
  int rank = 0;
  int nranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  int status = kExitFailure;
  try {
    MpiBench bench(rank, nranks, options);
    status = bench.run();
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "mpi-allreduce-bench: rank %d: out of memory for %zu-byte buffers\n",
                 rank, options.sweep.maxBytes);
    MPI_Abort(MPI_COMM_WORLD, kExitFailure);
  }
  MPI_Finalize();
  return status;
}
