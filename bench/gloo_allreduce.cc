// gloo-allreduce-bench: the Gloo side of bench/compare. Times Gloo's ring all-reduce over
// Gloo's TCP transport and prints the same nccl-tests-style rows and JSON as weft-perf.
//
// What is measured: gloo::allreduce with AllreduceOptions and the RING algorithm, the call
// torch's ProcessGroupGloo makes for dense CPU tensors (torch leaves the algorithm unset, which
// selects the ring). float32 sum only. Both columns are real runs: out-of-place passes separate
// input and output buffers (Gloo copies the input into the output as part of the ring);
// in-place passes the output only, which is what torch does. Each (size, placement) builds its
// options once and reuses them for every iteration, so per-call setup is not timed.
//
// Ranks come from RANK and WORLD_SIZE (weftrun and torchrun set them). The ranks find each
// other through a gloo::rendezvous::FileStore in a directory shared by all of them: -s DIR, or
// by default $TMPDIR/gloo-allreduce-bench (keys are prefixed with MASTER_ADDR:MASTER_PORT,
// and each rank deletes its keys once every rank has connected).
#include <getopt.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/config.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "weft-perf/perf_common.h"

namespace {

using weftperf::kExitFailure;
using weftperf::kExitOk;
using weftperf::kExitUsage;

constexpr size_t kGuardBytes = 4096;    // poisoned bytes after the output, checked after each check
constexpr unsigned char kPoison = 0xA5;  // 0xA5A5A5A5 is no sum of small integers
constexpr size_t kHostSlotBytes = 256;
constexpr uint32_t kDataTag = 0;
constexpr uint32_t kControlTag = 1;
constexpr auto kTimeout = std::chrono::seconds(300);

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

struct Options : weftperf::CommonOptions {
  std::string storeDir;
  std::string address = "127.0.0.1";
};

void printUsage() {
  std::printf(
      "Usage: gloo-allreduce-bench [options]\n"
      "Times Gloo's ring all-reduce (float32 sum) over Gloo's TCP transport and prints an\n"
      "nccl-tests-style table like weft-perf's. Start one process per rank with RANK and\n"
      "WORLD_SIZE set (weftrun -n N gloo-allreduce-bench ...); rank 0 prints.\n"
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
      "  -s, --store DIR         rendezvous directory shared by the ranks\n"
      "                          (default $TMPDIR/gloo-allreduce-bench, TMPDIR defaulting to /tmp)\n"
      "  -a, --address HOST      address Gloo's TCP transport binds (default 127.0.0.1)\n"
      "  -h, --help              print this help\n"
      "\n"
      "SIZE takes an optional K, M or G suffix (powers of 1024) and is rounded down to a\n"
      "multiple of 4 bytes. Time is per iteration, the maximum over ranks; algbw = size / time,\n"
      "busbw = algbw * 2(n-1)/n (GB/s). Exit status: 0 success, 1 failure, 2 bad command line.\n");
}

constexpr const char* kTool = "gloo-allreduce-bench";

// Returns kExitOk after --help, kExitUsage for a bad command line, or -1 to go on.
int parseArgs(int argc, char** argv, Options* options) {
  static const std::string kShortOptions = weftperf::shortOptions("s:a:h");
  static const std::vector<option> kLongOptions = weftperf::longOptions({
      {"store", required_argument, nullptr, 's'},
      {"address", required_argument, nullptr, 'a'},
      {"help", no_argument, nullptr, 'h'},
  });
  const int status = weftperf::readOptions(
      argc, argv, kTool, kShortOptions, kLongOptions.data(), options, printUsage, [&](int c, const std::string& arg) {
        switch (c) {
          case 's':
            if (arg.empty()) return weftperf::usageError(kTool, "-s: needs a directory");
            options->storeDir = arg;
            break;
          case 'a':
            if (arg.empty()) return weftperf::usageError(kTool, "-a: needs a host name or address");
            options->address = arg;
            break;
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
// partial sum is exact in float32 whatever order the ring adds them in.
float checkValue(int rank, size_t i) { return static_cast<float>((i * 3 + rank * 5) % 7) - 3.0f; }

class GlooBench {
 public:
  GlooBench(std::shared_ptr<gloo::Context> context, const Options& options)
      : context_(std::move(context)),
        rank_(context_->rank),
        nranks_(context_->size),
        options_(options) {}

  int run();

 private:
  void barrier();
  double reduceOne(double value, ReduceFn fn);
  void printPreamble();
  weftperf::Measurement measure(size_t count, bool inPlace);
  long long checkedRun(size_t count, bool inPlace);

  std::shared_ptr<gloo::Context> context_;
  int rank_;
  int nranks_;
  const Options& options_;
  Buffer send_;
  Buffer recv_;
  long long errors_ = 0;  // failed checks and stray writes (printFooter), over all ranks
};

void GlooBench::barrier() {
  gloo::BarrierOptions opts(context_);
  opts.setTag(kControlTag);
  opts.setTimeout(kTimeout);
  gloo::barrier(opts);
}

double GlooBench::reduceOne(double value, ReduceFn fn) {
  gloo::AllreduceOptions opts(context_);
  opts.setOutput(&value, 1);
  opts.setReduceFunction(fn);
  opts.setTag(kControlTag);
  opts.setTimeout(kTimeout);
  gloo::allreduce(opts);
  return value;
}

void GlooBench::printPreamble() {
  // Pid and host of every rank, gathered by a byte-wise sum in which other ranks' slots are 0.
  std::vector<uint8_t> slots(static_cast<size_t>(nranks_) * kHostSlotBytes, 0);
  uint8_t* mine = slots.data() + static_cast<size_t>(rank_) * kHostSlotBytes;
  const int64_t pid = getpid();
  std::memcpy(mine, &pid, sizeof pid);
  char* host = reinterpret_cast<char*>(mine + sizeof pid);
  if (gethostname(host, kHostSlotBytes - sizeof pid - 1) != 0) std::strcpy(host, "?");
  gloo::AllreduceOptions opts(context_);
  opts.setOutput(slots.data(), slots.size());
  opts.setReduceFunction(static_cast<ReduceFn>(&gloo::sum<uint8_t>));
  opts.setTag(kControlTag);
  gloo::allreduce(opts);
  if (rank_ != 0) return;

  const weftperf::Sweep& sweep = options_.sweep;
  std::printf("# gloo-allreduce-bench: Gloo %d.%d.%d ring all-reduce over TCP (%s), %d ranks\n",
              GLOO_VERSION_MAJOR, GLOO_VERSION_MINOR, GLOO_VERSION_PATCH,
              options_.address.c_str(), nranks_);
  std::printf("# minBytes %zu maxBytes %zu step: %s warmup iters: %ld iters: %ld validation: %d\n",
              sweep.minBytes, sweep.maxBytes, sweep.describeStep().c_str(), options_.warmupIters,
              options_.iters, options_.check ? 1 : 0);
  std::printf("#\n# Using ranks:\n");
  for (int r = 0; r < nranks_; ++r) {
    const uint8_t* slot = slots.data() + static_cast<size_t>(r) * kHostSlotBytes;
    int64_t rankPid = 0;
    std::memcpy(&rankPid, slot, sizeof rankPid);
    slots[static_cast<size_t>(r + 1) * kHostSlotBytes - 1] = 0;
    std::printf("#  Rank %2d Pid %6lld on %10s\n", r, static_cast<long long>(rankPid),
                reinterpret_cast<const char*>(slot + sizeof rankPid));
  }
  std::printf("#\n");
}

int GlooBench::run() {
  const size_t maxBytes = options_.sweep.maxBytes;
  send_ = allocateFloats(maxBytes);
  recv_ = allocateFloats(maxBytes + kGuardBytes);
  const size_t maxCount = maxBytes / sizeof(float);
  for (size_t i = 0; i < maxCount; ++i) send_[i] = checkValue(rank_, i);

  printPreamble();
  if (rank_ == 0) weftperf::printColumnHeader(stdout);
  std::vector<weftperf::Row> rows;
  for (size_t size : options_.sweep.sizes()) {
    const size_t count = size / sizeof(float);
    if (count == 0) {
      if (rank_ == 0) std::printf("# %zu B skipped: less than one float\n", size);
      continue;
    }
    weftperf::Row row = weftperf::floatSumAllReduceRow(count, nranks_);
    row.oop = measure(count, false);
    row.ip = measure(count, true);
    rows.push_back(row);
    if (rank_ == 0) weftperf::printRow(stdout, row);
  }
  int status = errors_ != 0 ? kExitFailure : kExitOk;
  if (rank_ == 0) status = weftperf::finishReport("gloo-allreduce-bench", rows, errors_, options_.check, options_.jsonPath);
  // Every rank leaves once rank 0 has written everything (a failing rank that left at once
  // would have the launcher stop rank 0 before its report is out).
  std::fflush(nullptr);
  barrier();
  return status;
}

weftperf::Measurement GlooBench::measure(size_t count, bool inPlace) {
  float* recv = recv_.get();
  if (inPlace) std::memcpy(recv, send_.get(), count * sizeof(float));

  gloo::AllreduceOptions opts(context_);
  opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
  if (!inPlace) opts.setInput(send_.get(), count);
  opts.setOutput(recv, count);
  opts.setReduceFunction(static_cast<ReduceFn>(&gloo::sum<float>));
  opts.setTag(kDataTag);
  opts.setTimeout(kTimeout);

  for (long i = 0; i < options_.warmupIters; ++i) gloo::allreduce(opts);
  barrier();
  const auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < options_.iters; ++i) gloo::allreduce(opts);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  const double us = std::chrono::duration<double, std::micro>(elapsed).count() /
                    static_cast<double>(options_.iters);
  const double timeUs = reduceOne(us, static_cast<ReduceFn>(&gloo::max<double>));

  const long long wrong = options_.check ? checkedRun(count, inPlace) : -1;
  return weftperf::allReduceMeasurement(count * sizeof(float), nranks_, timeUs, wrong);
}

long long GlooBench::checkedRun(size_t count, bool inPlace) {
  const size_t bytes = count * sizeof(float);
  float* recv = recv_.get();
  unsigned char* raw = reinterpret_cast<unsigned char*>(recv);
  if (inPlace) {
    std::memcpy(recv, send_.get(), bytes);
    std::memset(raw + bytes, kPoison, kGuardBytes);
  } else {
    std::memset(raw, kPoison, bytes + kGuardBytes);
  }
  gloo::AllreduceOptions opts(context_);
  opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
  if (!inPlace) opts.setInput(send_.get(), count);
  opts.setOutput(recv, count);
  opts.setReduceFunction(static_cast<ReduceFn>(&gloo::sum<float>));
  opts.setTag(kDataTag);
  opts.setTimeout(kTimeout);
  gloo::allreduce(opts);

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
  // Counts stay far below 2^53, so a double sum is exact.
  const ReduceFn sum = static_cast<ReduceFn>(&gloo::sum<double>);
  wrong = static_cast<long long>(reduceOne(static_cast<double>(wrong), sum));
  stray = static_cast<long long>(reduceOne(static_cast<double>(stray), sum));
  errors_ += (wrong != 0 ? 1 : 0) + stray;
  return wrong;
}

// Connects all ranks through the file store, then removes this rank's keys once everyone is
// connected, so a later run reusing the directory and port starts clean.
std::shared_ptr<gloo::Context> connect(int rank, int nranks, const Options& options) {
  const std::string dir = options.storeDir.empty()
                              ? envOr("TMPDIR", "/tmp") + "/gloo-allreduce-bench"
                              : options.storeDir;
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    throw std::runtime_error("cannot create the store directory " + dir + ": " +
                             std::strerror(errno));
  }
  gloo::rendezvous::FileStore fileStore(dir);
  const std::string prefix = envOr("MASTER_ADDR", "local") + ":" + envOr("MASTER_PORT", "0");
  gloo::rendezvous::PrefixStore store(prefix, fileStore);

  gloo::transport::tcp::attr attr;
  attr.hostname = options.address;
  auto device = gloo::transport::tcp::CreateDevice(attr);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, nranks);
  context->setTimeout(kTimeout);
  context->connectFullMesh(store, device);

  gloo::BarrierOptions opts(context);
  opts.setTag(kControlTag);
  gloo::barrier(opts);
  for (const std::string& path : fileStore.getAllKeyFilePaths()) unlink(path.c_str());
  return context;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (const int status = parseArgs(argc, argv, &options); status >= 0) return status;

  long rank = 0;
  long nranks = 0;
  if (!envInt("WORLD_SIZE", 1, 1 << 20, &nranks) || !envInt("RANK", 0, nranks - 1, &rank)) {
    std::fprintf(stderr,
                 "gloo-allreduce-bench: RANK and WORLD_SIZE must be set (0 <= RANK < "
                 "WORLD_SIZE); start it with a launcher such as weftrun\n");
    return kExitFailure;
  }
  try {
    auto context = connect(static_cast<int>(rank), static_cast<int>(nranks), options);
    GlooBench bench(context, options);
    return bench.run();
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "gloo-allreduce-bench: rank %ld: out of memory for %zu-byte buffers\n",
                 rank, options.sweep.maxBytes);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gloo-allreduce-bench: rank %ld: %s\n", rank, e.what());
  }
  return kExitFailure;
}
