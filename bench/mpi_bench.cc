// mpi-bench: the Open MPI side of `bench/compare --peer mpi`. Times MPI_Allreduce (MPI_SUM),
// MPI_Bcast (root 0) or MPI_Allgather on MPI_FLOAT over MPI_COMM_WORLD and prints the same
// nccl-tests-style rows and JSON as weft-perf (tools/weft-perf/perf_common.cc), with weft-perf's
// size conventions (all-gather's size is its whole output, each rank's block size / n).
//
// What is measured: whatever the MPI library does for the call with the run's settings (Open
// MPI 4.1 on one host: coll/tuned's decision rules over the vader shared-memory BTL). Out of
// place passes separate send and receive buffers; in place passes MPI_IN_PLACE. MPI_Bcast has
// only one form, so both columns run it. Before each timed loop the ranks meet at an
// MPI_Barrier; the time per iteration is the maximum over ranks. The data check (-c 1): small
// integers whose sums are exact in float32, a poisoned guard after the output, and a count of
// wrong elements and stray guard words summed over ranks.
//
// Start it with mpirun (mpirun --allow-run-as-root --oversubscribe -np N mpi-bench
// [allreduce|broadcast|allgather] ...); rank 0 prints.
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

enum class Collective { AllReduce, Broadcast, AllGather };

struct Options : weftperf::CommonOptions {
  Collective collective = Collective::AllReduce;
  const char* name = "allreduce";
};

void printUsage() {
  std::printf(
      "Usage: mpi-bench [allreduce|broadcast|allgather] [options]\n"
      "Times MPI_Allreduce (MPI_SUM), MPI_Bcast (root 0) or MPI_Allgather on MPI_FLOAT and\n"
      "prints an nccl-tests-style table like weft-perf's. Start it with mpirun\n"
      "(mpirun -np N mpi-bench ...); rank 0 prints.\n"
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
      "multiple of 4 bytes (all-gather: of 4 x ranks). Time is per iteration, the maximum over\n"
      "ranks; algbw = size / time, busbw = algbw x 2(n-1)/n (allreduce), 1 (broadcast) or\n"
      "(n-1)/n (allgather), in GB/s. Exit status: 0 success, 1 failure, 2 bad command line.\n");
}

constexpr const char* kTool = "mpi-bench";

// Returns kExitOk after --help, kExitUsage for a bad command line, or -1 to go on. Runs before
// MPI_Init; every rank parses the same arguments, so all of them return the same way.
int parseArgs(int argc, char** argv, Options* options) {
  static const std::string kShortOptions = weftperf::shortOptions("h");
  static const std::vector<option> kLongOptions = weftperf::longOptions({
      {"help", no_argument, nullptr, 'h'},
  });
  const int status = weftperf::readOptions(argc, argv, kTool, kShortOptions, kLongOptions.data(), options, printUsage,
                                           [](int, const std::string&) { return -1; });
  if (status >= 0) return status;
  if (optind < argc) {
    const std::string name = argv[optind++];
    if (name == "allreduce") {
      options->collective = Collective::AllReduce;
    } else if (name == "broadcast") {
      options->collective = Collective::Broadcast;
      options->name = "broadcast";
    } else if (name == "allgather") {
      options->collective = Collective::AllGather;
      options->name = "allgather";
    } else {
      return weftperf::usageError(kTool, "unknown collective '%s' (allreduce, broadcast, allgather)", name.c_str());
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
  // One call for a row of `count` floats (all-gather: count / n per rank).
  void collective(size_t count, bool inPlace) {
    float* recv = recv_.get();
    switch (options_.collective) {
      case Collective::AllReduce:
        MPI_Allreduce(inPlace ? MPI_IN_PLACE : send_.get(), recv, static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                      MPI_COMM_WORLD);
        break;
      case Collective::Broadcast:
        MPI_Bcast(recv, static_cast<int>(count), MPI_FLOAT, 0, MPI_COMM_WORLD);
        break;
      case Collective::AllGather: {
        const int block = static_cast<int>(count / static_cast<size_t>(nranks_));
        MPI_Allgather(inPlace ? MPI_IN_PLACE : send_.get(), block, MPI_FLOAT, recv, block, MPI_FLOAT, MPI_COMM_WORLD);
        break;
      }
    }
  }
  // Puts this rank's input where the call reads it: the broadcast root's buffer, or in place.
  void loadInput(size_t count, bool inPlace) {
    const size_t block = count / static_cast<size_t>(nranks_);
    switch (options_.collective) {
      case Collective::AllReduce:
        if (inPlace) std::memcpy(recv_.get(), send_.get(), count * sizeof(float));
        break;
      case Collective::Broadcast:
        if (rank_ == 0) std::memcpy(recv_.get(), send_.get(), count * sizeof(float));
        break;
      case Collective::AllGather:
        if (inPlace) std::memcpy(recv_.get() + static_cast<size_t>(rank_) * block, send_.get(), block * sizeof(float));
        break;
    }
  }
  // What element i of the output must hold.
  float expected(size_t count, size_t i) const {
    switch (options_.collective) {
      case Collective::AllReduce: {
        float want = 0.0f;
        for (int r = 0; r < nranks_; ++r) want += checkValue(r, i);
        return want;
      }
      case Collective::Broadcast: return checkValue(0, i);
      case Collective::AllGather: {
        const size_t block = count / static_cast<size_t>(nranks_);
        return checkValue(static_cast<int>(i / block), i % block);
      }
    }
    return 0;
  }
  double busFactor() const {
    const double n = nranks_;
    switch (options_.collective) {
      case Collective::AllReduce: return 2.0 * (n - 1) / n;
      case Collective::Broadcast: return 1.0;
      case Collective::AllGather: return (n - 1) / n;
    }
    return 1.0;
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
  long long errors_ = 0;  // failed checks and stray writes (printFooter), over all ranks
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
  const char* call = options_.collective == Collective::AllReduce   ? "MPI_Allreduce (MPI_FLOAT, MPI_SUM)"
                     : options_.collective == Collective::Broadcast ? "MPI_Bcast (MPI_FLOAT, root 0)"
                                                                    : "MPI_Allgather (MPI_FLOAT)";
  std::printf("# mpi-bench %s: %s %s, %d ranks\n", options_.name, version.c_str(), call, nranks_);
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
  const size_t multiple = options_.collective == Collective::AllGather ? static_cast<size_t>(nranks_) : 1;
  for (size_t size : options_.sweep.sizes()) {
    const size_t count = size / sizeof(float) / multiple * multiple;
    if (count == 0) {
      if (rank_ == 0) std::printf("# %zu B skipped: less than %zu float\n", size, multiple);
      continue;
    }
    weftperf::Row row;
    row.collective = options_.name;
    row.bytes = count * sizeof(float);
    row.count = count / multiple;  // nccl-tests' count: what the call is given (per rank for all-gather)
    row.type = "float";
    row.redop = options_.collective == Collective::AllReduce ? "sum" : "none";
    row.root = options_.collective == Collective::Broadcast ? 0 : -1;
    row.nranks = nranks_;
    row.oop = measure(count, false);
    row.ip = measure(count, true);
    rows.push_back(row);
    if (rank_ == 0) weftperf::printRow(stdout, row);
  }
  int status = errors_ != 0 ? kExitFailure : kExitOk;
  if (rank_ == 0) status = weftperf::finishReport("mpi-bench", rows, errors_, options_.check, options_.jsonPath);
  // Every rank leaves once rank 0 has written everything (a failing rank that left at once
  // would have the launcher stop rank 0 before its report is out).
  std::fflush(nullptr);
  MPI_Barrier(MPI_COMM_WORLD);
  return status;
}

weftperf::Measurement MpiBench::measure(size_t count, bool inPlace) {
  loadInput(count, inPlace);
  for (long i = 0; i < options_.warmupIters; ++i) collective(count, inPlace);
  MPI_Barrier(MPI_COMM_WORLD);
  const auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < options_.iters; ++i) collective(count, inPlace);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  double us = std::chrono::duration<double, std::micro>(elapsed).count() /
              static_cast<double>(options_.iters);
  MPI_Allreduce(MPI_IN_PLACE, &us, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);

  const long long wrong = options_.check ? checkedRun(count, inPlace) : -1;
  return weftperf::collectiveMeasurement(count * sizeof(float), busFactor(), us, wrong);
}

long long MpiBench::checkedRun(size_t count, bool inPlace) {
  const size_t bytes = count * sizeof(float);
  float* recv = recv_.get();
  unsigned char* raw = reinterpret_cast<unsigned char*>(recv);
  std::memset(raw, kPoison, bytes + kGuardBytes);
  loadInput(count, inPlace);
  collective(count, inPlace);

  long long wrong = 0;
  for (size_t i = 0; i < count; ++i) wrong += recv[i] != expected(count, i);
  long long stray = 0;
  for (size_t offset = 0; offset < kGuardBytes; offset += sizeof(float)) {
    if (std::memcmp(raw + bytes + offset, "\xA5\xA5\xA5\xA5", sizeof(float)) != 0) ++stray;
  }
  wrong = sumOverRanks(wrong);
  stray = sumOverRanks(stray);
  errors_ += (wrong != 0 ? 1 : 0) + stray;
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
    std::fprintf(stderr, "mpi-bench: rank %d: out of memory for %zu-byte buffers\n",
                 rank, options.sweep.maxBytes);
    MPI_Abort(MPI_COMM_WORLD, kExitFailure);
  }
  MPI_Finalize();
  return status;
}
