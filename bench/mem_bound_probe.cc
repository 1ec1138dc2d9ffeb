// mem-bound-probe: the memory-bandwidth side of `bench/compare --peer mpi`. Run as N concurrent
// processes (weftrun -n N mem-bound-probe ...), it measures, for each size of the sweep and
// while all N processes run the same kernel at once:
//   * copy: memcpy(dst, src, size), and the same copy with streaming stores (Weft's
//           kernels::copyStreaming), reported as bytes copied per second; the faster of the
//           two is the bound. glibc's memcpy changes strategy with the size (on the 2-core
//           EPYC VM it copies 128 MiB at about half the rate it copies 256 MiB, where it
//           switches to streaming stores over four pages at once), so memcpy alone understated
//           what the memory can do below that switch;
//   * sum:  c[i] = a[i] + b[i] over float32 arrays of `size` bytes each (a plain loop that the
//           compiler vectorises), reported as bytes of c written per second and as bytes
//           touched per second (3x: a and b read, c written).
// Each value is per process; rank 0 prints, and writes to -J, the minimum over processes.
//
// The all-reduce memory bound. For busbw this program defines the bound as the per-process
// copy bandwidth at that size with N processes copying concurrently. On shared memory every
// byte that busbw counts as crossing the "bus" in a ring or one-shot all-reduce has to be
// moved by some process's load/store at least once (a copy into or out of the shared segment,
// or a reduction that reads it), and each process can move at most what memcpy moves while
// the other N-1 processes compete for the same caches, memory controllers and (when N exceeds
// the core count, as with N=4 on 2 cores) the same cores: time is wall-clock, so an
// oversubscribed process gets only its share of a core. busbw cannot exceed this bound; a
// reduction also has to add, so the sum kernel's figures show how far below it one can expect
// to land. Small sizes fit in cache, so there the bound is cache bandwidth, not DRAM's.
//
// Method. Every process allocates three buffers of the largest size and touches them before
// measuring. For each size and kernel it runs one warm-up call, waits at a barrier, then runs
// the kernel in batches (doubling while a batch moves less than 1 MiB) until -t seconds of
// wall-clock time have passed. All processes start together and run for the same time, so
// they overlap for all but the barrier's release skew (microseconds when cores are free, up to
// a scheduler slice when oversubscribed; small against the default 0.25 s).
//
// Synchronisation uses no network: a small file in /dev/shm named after MASTER_ADDR and
// MASTER_PORT (weftrun picks a free port per job) is mapped by every process and holds a
// counting barrier and every process's results. Rank 0 removes the file once all have mapped
// it. Ranks come from RANK and WORLD_SIZE.
#include <fcntl.h>
#include <getopt.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/copy_streaming.h"
#include "weft-perf/perf_common.h"

namespace {

using weftperf::kExitFailure;
using weftperf::kExitOk;
using weftperf::kExitUsage;
using Clock = std::chrono::steady_clock;

struct Options : weftperf::CommonOptions {
  double seconds = 0.25;
};

enum Metric { kCopy, kStream, kSum, kMetrics };  // kCopy: memcpy; kSum: bytes of c written; touched = 3x

// The bound at one size: the faster copy, each taken as its slowest process.
double boundOf(const std::vector<double>& minimum, size_t s) {
  return std::max(minimum[s * kMetrics + kCopy], minimum[s * kMetrics + kStream]);
}

void printUsage() {
  std::printf(
      "Usage: mem-bound-probe [options]\n"
      "Measures per-process copy (memcpy; streaming stores) and float32 a+b->c bandwidth while N processes run at\n"
      "once (weftrun -n N mem-bound-probe ...); rank 0 prints the minimum over processes.\n"
      "The copy bandwidth is the all-reduce memory bound for busbw (see the source header).\n"
      "\n"
      "  -b, --minbytes SIZE     smallest buffer (default 8)\n"
      "  -e, --maxbytes SIZE     largest buffer (default 128M)\n"
      "  -f, --stepfactor N      multiply the size by N each step (default 2);\n"
      "                          0 or 1 steps by -i instead\n"
      "  -i, --stepbytes SIZE    add SIZE each step (default 1M)\n"
      "  -t, --seconds S         wall-clock time per size and kernel (default 0.25)\n"
      "  -J, --json FILE         also write the rows to FILE as a JSON array\n"
      "  -h, --help              print this help\n"
      "\n"
      "SIZE takes an optional K, M or G suffix (powers of 1024) and is rounded down to a\n"
      "multiple of 4 bytes. Bandwidths are GB/s (1e9 bytes/s). Exit status: 0 success,\n"
      "1 failure, 2 bad command line.\n");
}

constexpr const char* kTool = "mem-bound-probe";

// Returns kExitOk after --help, kExitUsage for a bad command line, or -1 to go on.
int parseArgs(int argc, char** argv, Options* options) {
  static const option kLongOptions[] = {
      {"minbytes", required_argument, nullptr, 'b'},
      {"maxbytes", required_argument, nullptr, 'e'},
      {"stepfactor", required_argument, nullptr, 'f'},
      {"stepbytes", required_argument, nullptr, 'i'},
      {"seconds", required_argument, nullptr, 't'},
      {"json", required_argument, nullptr, 'J'},
      {"help", no_argument, nullptr, 'h'},
      {nullptr, 0, nullptr, 0},
  };
  const int status = weftperf::readOptions(
      argc, argv, kTool, ":b:e:f:i:t:J:h", kLongOptions, options, printUsage, [&](int c, const std::string& arg) {
        switch (c) {
          case 't': {
            char* end = nullptr;
            options->seconds = std::strtod(arg.c_str(), &end);
            if (arg.empty() || *end != '\0' || !(options->seconds > 0 && options->seconds <= 60)) {
              return weftperf::usageError(kTool, "-t: '%s' is not a time in seconds (0 < S <= 60)", arg.c_str());
            }
            break;
          }
        }
        return -1;
      });
  if (status >= 0) return status;
  if (optind < argc) return weftperf::usageError(kTool, "unexpected argument '%s'", argv[optind]);
  if (std::string error; !weftperf::finishCommonOptions(options, &error)) {
    return weftperf::usageError(kTool, "%s", error.c_str());
  }
  return -1;
}

bool envInt(const char* name, long min, long max, long* value) {
  const char* text = std::getenv(name);
  return text != nullptr && weftperf::parseInt(text, min, max, value);
}

std::string envOr(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}

// The mapped file (zero-filled when created): a barrier, then results[rank][size][metric] in
// GB/s at byte offset kResultsOffset.
struct Shared {
  std::atomic<uint32_t> arrived;
  std::atomic<uint32_t> generation;
  std::atomic<uint32_t> failed;
};
static_assert(std::atomic<uint32_t>::is_always_lock_free, "process-shared atomics");
constexpr size_t kResultsOffset = 64;
double* resultsOf(Shared* s) {
  return reinterpret_cast<double*>(reinterpret_cast<char*>(s) + kResultsOffset);
}

class SharedFile {
 public:
  SharedFile(const std::string& name, size_t bytes) : name_(name), bytes_(bytes) {
    const int fd = shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
    if (fd < 0) throw std::runtime_error("shm_open " + name + ": " + std::strerror(errno));
    // Every rank sets the same size; a file that already has it keeps its contents.
    if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      close(fd);
      throw std::runtime_error("ftruncate " + name + ": " + std::strerror(errno));
    }
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) throw std::runtime_error("mmap " + name + ": " + std::strerror(errno));
    shared_ = static_cast<Shared*>(p);
  }
  ~SharedFile() { munmap(shared_, bytes_); }
  SharedFile(const SharedFile&) = delete;
  SharedFile& operator=(const SharedFile&) = delete;
  Shared* get() { return shared_; }
  void unlinkName() { shm_unlink(name_.c_str()); }

 private:
  std::string name_;
  size_t bytes_;
  Shared* shared_ = nullptr;
};

// A counting barrier across processes. Waiters spin briefly, then yield, then sleep, so that
// oversubscribed runs do not steal the cores from the ranks still working. Gives up after
// 300 s (a rank died) and returns false.
bool barrier(Shared* s, uint32_t nranks) {
  const uint32_t gen = s->generation.load(std::memory_order_acquire);
  if (s->arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == nranks) {
    s->arrived.store(0, std::memory_order_relaxed);
    s->generation.fetch_add(1, std::memory_order_acq_rel);
    return true;
  }
  const auto deadline = Clock::now() + std::chrono::seconds(300);
  for (long spins = 0; s->generation.load(std::memory_order_acquire) == gen; ++spins) {
    if (s->failed.load(std::memory_order_relaxed) != 0) return false;
    if (spins < 1000) continue;
    if (spins < 2000) {
      sched_yield();
      continue;
    }
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  return true;
}

__attribute__((noinline)) void sumFloats(float* __restrict c, const float* __restrict a,
                                         const float* __restrict b, size_t n) {
  for (size_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
}

// Runs `op` in growing batches for `seconds` of wall-clock time; returns calls per second.
template <typename Op>
double callsPerSecond(size_t bytes, double seconds, Op op) {
  const auto budget = std::chrono::duration<double>(seconds);
  long calls = 0;
  long batch = 1;
  const auto start = Clock::now();
  auto now = start;
  while (now - start < budget) {
    for (long i = 0; i < batch; ++i) {
      op();
      asm volatile("" ::: "memory");  // keep every call: its output is "used"
    }
    calls += batch;
    if (static_cast<size_t>(batch) * bytes < (size_t{1} << 20)) batch *= 2;
    now = Clock::now();
  }
  return static_cast<double>(calls) / std::chrono::duration<double>(now - start).count();
}

void writeJson(const std::string& path, const std::vector<size_t>& sizes, int nranks,
               const std::vector<double>& minimum) {
  std::FILE* out = std::fopen(path.c_str(), "w");
  if (out == nullptr) throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
  // {"size":B,"nprocs":N,"copy_gbps":bound,"memcpy_gbps":..,"stream_copy_gbps":..,"sum_gbps":y,
  //  "sum_touched_gbps":3y}, each the minimum over ranks (the bound: the faster copy).
  std::fputs("[\n", out);
  for (size_t i = 0; i < sizes.size(); ++i) {
    const double sum = minimum[i * kMetrics + kSum];
    std::fprintf(out,
                 "  {\"size\":%zu,\"nprocs\":%d,\"copy_gbps\":%.6g,\"memcpy_gbps\":%.6g,"
                 "\"stream_copy_gbps\":%.6g,\"sum_gbps\":%.6g,\"sum_touched_gbps\":%.6g}%s\n",
                 sizes[i], nranks, boundOf(minimum, i), minimum[i * kMetrics + kCopy],
                 minimum[i * kMetrics + kStream], sum, 3 * sum, i + 1 < sizes.size() ? "," : "");
  }
  std::fputs("]\n", out);
  const bool failed = std::ferror(out) != 0;
  if (std::fclose(out) != 0 || failed) {
    throw std::runtime_error("cannot write " + path + ": " + std::strerror(errno));
  }
}

int run(const Options& options, int rank, int nranks) {
  std::vector<size_t> sizes;
  for (size_t size : options.sweep.sizes()) {
    if (size >= sizeof(float)) sizes.push_back(size / sizeof(float) * sizeof(float));
  }
  const size_t slots = sizes.size() * kMetrics;
  const std::string name = "/mem-bound-probe-" + envOr("MASTER_ADDR", "local") + "-" +
                           envOr("MASTER_PORT", "0") + "-" + std::to_string(nranks);
  SharedFile file(name, kResultsOffset + static_cast<size_t>(nranks) * slots * sizeof(double));
  Shared* shared = file.get();

  const size_t maxBytes = sizes.empty() ? sizeof(float) : sizes.back();
  std::vector<float> a(maxBytes / sizeof(float)), b(a.size()), c(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>(i % 7);
    b[i] = static_cast<float>(rank);
  }
  if (!barrier(shared, static_cast<uint32_t>(nranks))) {
    throw std::runtime_error("timed out waiting for the other processes to start");
  }
  if (rank == 0) file.unlinkName();  // everyone has it mapped now

  double* results = resultsOf(shared);
  double* mine = results + static_cast<size_t>(rank) * slots;
  for (size_t s = 0; s < sizes.size(); ++s) {
    const size_t bytes = sizes[s];
    const size_t n = bytes / sizeof(float);
    auto copy = [&] { std::memcpy(c.data(), a.data(), bytes); };
    auto stream = [&] { weft::kernels::copyStreaming(c.data(), a.data(), bytes); };
    auto sum = [&] { sumFloats(c.data(), a.data(), b.data(), n); };
    bool ok = true;
    // One warm-up call, then every process starts timing together.
    auto measure = [&](Metric metric, auto op) {
      op();
      ok = ok && barrier(shared, static_cast<uint32_t>(nranks));
      if (ok) mine[s * kMetrics + metric] = callsPerSecond(bytes, options.seconds, op) * 1e-9 * static_cast<double>(bytes);
    };
    measure(kCopy, copy);
    measure(kStream, stream);
    measure(kSum, sum);
    if (!ok) {
      shared->failed.store(1);
      throw std::runtime_error("timed out at a barrier (did another process die?)");
    }
  }
  if (c[0] != a[0] + b[0]) throw std::runtime_error("the sum kernel computed a wrong value");
  if (!barrier(shared, static_cast<uint32_t>(nranks))) {
    throw std::runtime_error("timed out waiting for the other processes to finish");
  }
  if (rank != 0) return kExitOk;

  std::vector<double> minimum(results, results + slots);
  for (int r = 1; r < nranks; ++r) {
    const double* theirs = results + static_cast<size_t>(r) * slots;
    for (size_t i = 0; i < slots; ++i) minimum[i] = std::min(minimum[i], theirs[i]);
  }
  std::printf("# mem-bound-probe: %d concurrent processes, %.2f s per size and kernel; "
              "per-process GB/s, minimum over processes\n",
              nranks, options.seconds);
  std::printf("# bound: the faster copy (memcpy, or streaming stores), the all-reduce busbw bound. sum: c = a + b "
              "(float32), bytes of c per second; touched = 3x\n");
  std::printf("# %10s  %12s  %12s  %12s  %12s  %12s\n", "size", "memcpy", "streaming", "bound", "sum", "sum touched");
  std::printf("# %10s  %12s  %12s  %12s  %12s  %12s\n", "(B)", "(GB/s)", "(GB/s)", "(GB/s)", "(GB/s)", "(GB/s)");
  for (size_t s = 0; s < sizes.size(); ++s) {
    const double sumBw = minimum[s * kMetrics + kSum];
    std::printf("%12zu  %12.2f  %12.2f  %12.2f  %12.2f  %12.2f\n", sizes[s], minimum[s * kMetrics + kCopy],
                minimum[s * kMetrics + kStream], boundOf(minimum, s), sumBw, 3 * sumBw);
  }
  std::fflush(stdout);
  if (!options.jsonPath.empty()) writeJson(options.jsonPath, sizes, nranks, minimum);
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (const int status = parseArgs(argc, argv, &options); status >= 0) return status;
  long rank = 0;
  long nranks = 0;
  if (!envInt("WORLD_SIZE", 1, 1 << 16, &nranks) || !envInt("RANK", 0, nranks - 1, &rank)) {
    std::fprintf(stderr,
                 "mem-bound-probe: RANK and WORLD_SIZE must be set (0 <= RANK < WORLD_SIZE); "
                 "start it with a launcher such as weftrun\n");
    return kExitFailure;
  }
  try {
    return run(options, static_cast<int>(rank), static_cast<int>(nranks));
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "mem-bound-probe: rank %ld: out of memory for %zu-byte buffers\n", rank,
                 options.sweep.maxBytes);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mem-bound-probe: rank %ld: %s\n", rank, e.what());
  }
  return kExitFailure;
}
