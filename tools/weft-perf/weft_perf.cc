// weft-perf: an nccl-tests-style benchmark of Weft collectives, written against the public C
// API only. One process per rank, started by a launcher; rank 0 prints
// the table. Run `weft-perf -h` for the options.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "check_data.h"
#include "collectives.h"
#include "device_buffers.h"
#include "perf_common.h"
#include "weft_perf_options.h"
#include "weft/weft.h"

namespace weftperf {
namespace {

// Bytes after each output region that are poisoned before a checked run and must stay so.
constexpr size_t kGuardBytes = 4096;
// Per-rank slot of the pid/host exchange: an int64 pid, then the NUL-terminated host name.
constexpr size_t kHostSlotBytes = 256;


class WeftError : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct FreeDeleter {
  bool shared = false;  // from weftHostMemAlloc
  void operator()(unsigned char* p) const {
    if (shared) {
      (void)weftHostMemFree(p);
    } else {
      std::free(p);
    }
  }
};
using Buffer = std::unique_ptr<unsigned char[], FreeDeleter>;

struct DeviceDeleter {
  void operator()(unsigned char* p) const { gpu::release(p); }
};
using DeviceBuffer = std::unique_ptr<unsigned char[], DeviceDeleter>;

// Page-aligned host memory; with `shared`, from weftHostMemAlloc (-H).
Buffer allocateBuffer(size_t bytes, bool shared) {
  constexpr size_t kAlign = 4096;
  const size_t rounded = (bytes / kAlign + 1) * kAlign;  // never zero
  void* p = nullptr;
  if (shared) {
    if (weftHostMemAlloc(&p, rounded) != weftSuccess) throw std::bad_alloc();
  } else {
    p = std::aligned_alloc(kAlign, rounded);
  }
  if (p == nullptr) throw std::bad_alloc();
  return Buffer(static_cast<unsigned char*>(p), FreeDeleter{shared});
}

class Benchmark {
 public:
  Benchmark(weftComm_t comm, int rank, int nranks, const Options& options)
      : comm_(comm), rank_(rank), nranks_(nranks), options_(options), collective_(*options.collective) {}
  ~Benchmark() {
    if (stream_ != nullptr) gpu::destroyStream(stream_);
  }

  // Runs the whole sweep; throws WeftError when a Weft call fails. Returns the exit status.
  int run();

 private:
  // Where one placement's call reads and writes, and where stray writes would show.
  struct Placement {
    bool inPlace;
    const DataType& type;
    const RedOp& op;
    const CheckPattern& pattern;
    size_t count;  // the row's elements
    const void* send = nullptr;  // what the call gets (device memory with --gpu)
    unsigned char* recv = nullptr;
    size_t sendElements = 0, recvElements = 0;
    unsigned char* guard = nullptr;  // kGuardBytes that must stay poisoned
    unsigned char* checkRecv = nullptr;  // where the check reads recv and guard (host memory)
    unsigned char* checkGuard = nullptr;
  };

  void call(weftResult_t result, const char* what) const;
  void barrier();
  double maxOverRanks(double value);
  void sumOverRanks(long long* values, size_t n);
  void printPreamble();
  void runSweep(const DataType& type, const RedOp& op);
  Placement place(bool inPlace, const DataType& type, const RedOp& op, const CheckPattern& pattern, size_t count);
  void loadInput(const Placement& p);
  void issue(const Placement& p);
  Measurement measure(const Placement& p);
  double timeCollective(const Placement& p);
  long long checkedRun(const Placement& p);

  weftComm_t comm_;
  int rank_;
  int nranks_;
  const Options& options_;
  const Collective& collective_;
  Buffer send_;  // this rank's input pattern, maxBytes
  Buffer recv_;  // maxBytes plus the guard
  // --gpu: the calls' buffers (send_ and recv_ then hold the input and a copy of the output)
  DeviceBuffer deviceSend_;
  DeviceBuffer deviceRecv_;
  weftStream_t stream_ = nullptr;
  std::vector<Row> rows_;
  long long errors_ = 0;  // failed checks and stray writes (printFooter), over all ranks
};

void Benchmark::call(weftResult_t result, const char* what) const {
  if (result == weftSuccess) return;
  throw WeftError(std::string(what) + " failed: " + weftGetErrorString(result) + ": " +
                  weftGetLastError(comm_));
}

void Benchmark::barrier() {
  double token = 0.0;
  call(weftAllReduce(&token, &token, 1, weftFloat64, weftSum, comm_, nullptr), "weftAllReduce");
}

double Benchmark::maxOverRanks(double value) {
  call(weftAllReduce(&value, &value, 1, weftFloat64, weftMax, comm_, nullptr), "weftAllReduce");
  return value;
}

void Benchmark::sumOverRanks(long long* values, size_t n) {
  std::vector<int64_t> buffer(values, values + n);
  call(weftAllReduce(buffer.data(), buffer.data(), n, weftInt64, weftSum, comm_, nullptr),
       "weftAllReduce");
  for (size_t i = 0; i < n; ++i) values[i] = buffer[i];
}

// The parameter line and one line per rank (pid, host). Ranks send their pid and host name
// to rank 0 with a byte-wise sum all-reduce in which every other rank's slot is zero.
void Benchmark::printPreamble() {
  std::vector<uint8_t> slots(static_cast<size_t>(nranks_) * kHostSlotBytes, 0);
  uint8_t* mine = slots.data() + static_cast<size_t>(rank_) * kHostSlotBytes;
  const int64_t pid = getpid();
  std::memcpy(mine, &pid, sizeof pid);
  char* host = reinterpret_cast<char*>(mine + sizeof pid);
  if (gethostname(host, kHostSlotBytes - sizeof pid - 1) != 0) std::strcpy(host, "?");
  call(weftAllReduce(slots.data(), slots.data(), slots.size(), weftUint8, weftSum, comm_, nullptr),
       "weftAllReduce");
  if (rank_ != 0) return;

  int version = 0;
  call(weftGetVersion(&version), "weftGetVersion");
  const Sweep& sweep = options_.sweep;
  std::printf("# weft-perf %s: Weft %d.%d.%d, %d ranks\n", collective_.name, version / 10000,
              version / 100 % 100, version % 100, nranks_);
  std::printf("# minBytes %zu maxBytes %zu step: %s warmup iters: %ld iters: %ld validation: %d buffers: %s\n",
              sweep.minBytes, sweep.maxBytes, sweep.describeStep().c_str(), options_.warmupIters,
              options_.iters, options_.check ? 1 : 0, options_.gpu ? "gpu" : "host");
  std::printf("#\n# Using ranks:\n");
  for (int r = 0; r < nranks_; ++r) {
    const uint8_t* slot = slots.data() + static_cast<size_t>(r) * kHostSlotBytes;
    int64_t rankPid = 0;
    std::memcpy(&rankPid, slot, sizeof rankPid);
    slots[static_cast<size_t>(r + 1) * kHostSlotBytes - 1] = 0;  // in case of a garbled reply
    std::printf("#  Rank %2d Pid %6lld on %10s\n", r, static_cast<long long>(rankPid),
                reinterpret_cast<const char*>(slot + sizeof rankPid));
  }
  std::printf("#\n");
}

int Benchmark::run() {
  if (collective_.rooted && options_.root >= nranks_) {
    if (rank_ == 0) usageError(kTool, "-r %d: the root must be below the rank count, %d", options_.root, nranks_);
    return kExitUsage;
  }
  const size_t maxBytes = options_.sweep.maxBytes;
  send_ = allocateBuffer(maxBytes, options_.hostMemAlloc);
  recv_ = allocateBuffer(maxBytes + kGuardBytes, options_.hostMemAlloc);
  if (options_.gpu) {
    deviceSend_.reset(static_cast<unsigned char*>(gpu::allocate(maxBytes)));
    deviceRecv_.reset(static_cast<unsigned char*>(gpu::allocate(maxBytes + kGuardBytes)));
    stream_ = gpu::createStream();
  }

  printPreamble();
  if (rank_ == 0) printColumnHeader(stdout);
  for (const DataType* type : options_.types) {
    for (const RedOp* op : options_.ops) runSweep(*type, *op);
  }
  int status = kExitOk;
  if (rows_.empty()) {  // alike on every rank
    if (rank_ == 0) {
      std::fprintf(stderr, "weft-perf: nothing was measured: every size from -b to -e is less than one element%s\n",
                   collective_.blocked ? " per rank" : "");
    }
    status = kExitUsage;
  } else if (errors_ != 0) {
    status = kExitFailure;
  }
  if (rank_ == 0 && !rows_.empty()) status = finishReport(kTool, rows_, errors_, options_.check, options_.jsonPath);
  // A failing rank that returned at once would have the launcher stop rank 0 before its report
  // is out: every rank leaves once rank 0 has written everything.
  std::fflush(nullptr);
  barrier();
  return status;
}

void Benchmark::runSweep(const DataType& type, const RedOp& op) {
  const CheckPattern pattern(type, collective_.reduces ? op.id : kMovedOnly, nranks_);
  // The same data feeds the timed runs; every size uses a prefix of it.
  pattern.fill(send_.get(), rank_, options_.sweep.maxBytes / type.size);
  if (options_.gpu) gpu::toDevice(deviceSend_.get(), send_.get(), options_.sweep.maxBytes);
  const size_t multiple = collective_.blocked ? static_cast<size_t>(nranks_) : 1;
  for (size_t size : options_.sweep.sizes()) {
    const size_t count = size / type.size / multiple * multiple;
    if (count == 0) {
      if (rank_ == 0) std::printf("# %zu B skipped: less than %zu %s\n", size, multiple, type.name);
      continue;
    }
    Row row;
    row.collective = collective_.name;
    row.bytes = count * type.size;
    row.count = collective_.callCount(count, nranks_);  // nccl-tests' count: what the call is given
    row.type = type.name;
    row.redop = collective_.reduces ? op.name : "none";
    row.root = collective_.rooted ? options_.root : -1;
    row.nranks = nranks_;
    row.oop = measure(place(false, type, op, pattern, count));
    if (collective_.id != CollectiveId::SendRecv) row.ip = measure(place(true, type, op, pattern, count));
    rows_.push_back(row);
    if (rank_ == 0) printRow(stdout, row);
  }
}

// Out of place: input in send_, output at the start of recv_. In place, both inside recv_ at
// NCCL's layout: the send block at recv + offset (all-gather, gather), or the output at
// send + offset (reduce-scatter, scatter); the guard follows whichever region ends last.
Benchmark::Placement Benchmark::place(bool inPlace, const DataType& type, const RedOp& op, const CheckPattern& pattern,
                                      size_t count) {
  Placement p{inPlace, type, op, pattern, count};
  const BufferLayout layout = layoutFor(collective_, inPlace, count, nranks_, rank_, options_.root);
  p.sendElements = layout.sendElements;
  p.recvElements = layout.recvElements;
  unsigned char* arena = options_.gpu ? deviceRecv_.get() : recv_.get();
  const void* send = options_.gpu ? deviceSend_.get() : send_.get();
  p.send = inPlace ? arena + layout.sendBegin * type.size : send;
  p.recv = arena + layout.recvBegin * type.size;
  p.guard = arena + layout.guardBegin * type.size;
  p.checkRecv = recv_.get() + layout.recvBegin * type.size;
  p.checkGuard = recv_.get() + layout.guardBegin * type.size;
  return p;
}

// In place, the input goes where the call will read it (the output buffer).
void Benchmark::loadInput(const Placement& p) {
  if (!p.inPlace || p.sendElements == 0) return;
  if (options_.gpu) {
    gpu::toDevice(const_cast<void*>(p.send), send_.get(), p.sendElements * p.type.size);
  } else {
    std::memcpy(const_cast<void*>(p.send), send_.get(), p.sendElements * p.type.size);
  }
}

void Benchmark::issue(const Placement& p) {
  call(runCollective({collective_, p.send, p.recv, p.count, p.type, p.op.id, options_.root, comm_, rank_, nranks_,
                      p.inPlace, stream_}),
       collective_.name);
}

Measurement Benchmark::measure(const Placement& p) {
  loadInput(p);
  const double timeUs = timeCollective(p);
  const long long wrong = options_.check ? checkedRun(p) : -1;
  return collectiveMeasurement(p.count * p.type.size, collective_.busFactor(nranks_), timeUs, wrong);
}

double Benchmark::timeCollective(const Placement& p) {
  for (long i = 0; i < options_.warmupIters; ++i) issue(p);
  if (options_.gpu) gpu::synchronize(stream_);
  barrier();
  const auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < options_.iters; ++i) issue(p);
  if (options_.gpu) gpu::synchronize(stream_);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  const double us = std::chrono::duration<double, std::micro>(elapsed).count();
  return maxOverRanks(us / static_cast<double>(options_.iters));
}

// One run on freshly prepared buffers: the output poisoned, then (in place) the input put in
// its place within it, the guard poisoned. In place too the rest of the output is poisoned:
// the timed runs left the right answer there, which a call that wrote nothing would keep.
// Returns the wrong elements over all ranks and counts the failed check and stray writes.
long long Benchmark::checkedRun(const Placement& p) {
  if (options_.gpu) {
    gpu::fill(p.recv, kPoisonByte, p.recvElements * p.type.size);
    loadInput(p);
    gpu::fill(p.guard, kPoisonByte, kGuardBytes);
    issue(p);
    gpu::synchronize(stream_);
    gpu::toHost(p.checkRecv, p.recv, p.recvElements * p.type.size);
    gpu::toHost(p.checkGuard, p.guard, kGuardBytes);
    weftResult_t async = weftSuccess;
    call(weftCommGetAsyncError(comm_, &async), "weftCommGetAsyncError");
    call(async, collective_.name);
  } else {
    std::memset(p.recv, kPoisonByte, p.recvElements * p.type.size);
    loadInput(p);
    std::memset(p.guard, kPoisonByte, kGuardBytes);
    issue(p);
  }

  long long counts[2] = {0, 0};
  if (collective_.hasResult(rank_, options_.root)) {
    counts[0] = static_cast<long long>(p.pattern.countMismatches(p.checkRecv, p.recvElements, [&](size_t i) {
      return expectedElement(collective_, p.pattern, p.count, nranks_, rank_, options_.root, i);
    }));
  }
  for (size_t offset = 0; offset < kGuardBytes; offset += p.type.size) {
    for (size_t b = 0; b < p.type.size; ++b) {
      if (p.checkGuard[offset + b] != kPoisonByte) {
        ++counts[1];
        break;
      }
    }
  }
  sumOverRanks(counts, 2);
  errors_ += (counts[0] != 0 ? 1 : 0) + counts[1];
  return counts[0];
}

}  // namespace
}  // namespace weftperf
int main(int argc, char** argv) {
  using namespace weftperf;
  Options options;
  if (const int status = parseArgs(argc, argv, &options); status >= 0) return status;

  if (std::string error; options.gpu && !gpu::selectDevice(&error)) {
    std::fprintf(stderr, "weft-perf: %s\n", error.c_str());
    return kExitFailure;
  }
  weftComm_t comm = nullptr;
  if (const weftResult_t r = weftCommInitFromEnv(&comm); r != weftSuccess) {
    std::fprintf(stderr, "weft-perf: weftCommInitFromEnv failed: %s: %s\n",
                 weftGetErrorString(r), weftGetLastError(nullptr));
    return kExitFailure;
  }
  int rank = 0;
  int nranks = 0;
  weftResult_t r = weftCommUserRank(comm, &rank);
  if (r == weftSuccess) r = weftCommCount(comm, &nranks);
  if (r != weftSuccess) {
    std::fprintf(stderr, "weft-perf: cannot read the communicator's rank and size: %s: %s\n",
                 weftGetErrorString(r), weftGetLastError(comm));
    weftCommAbort(comm);
    return kExitFailure;
  }

  int status = kExitOk;
  try {
    Benchmark benchmark(comm, rank, nranks, options);
    status = benchmark.run();
  } catch (const WeftError& e) {
    std::fprintf(stderr, "weft-perf: rank %d: %s\n", rank, e.what());
    weftCommAbort(comm);
    return kExitFailure;
  } catch (const std::runtime_error& e) {  // the GPU runtime, with --gpu
    std::fprintf(stderr, "weft-perf: rank %d: %s\n", rank, e.what());
    weftCommAbort(comm);
    return kExitFailure;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "weft-perf: rank %d: out of memory for %zu-byte buffers (lower -e)\n",
                 rank, options.sweep.maxBytes);
    weftCommAbort(comm);
    return kExitFailure;
  }
  if (r = weftCommDestroy(comm); r != weftSuccess) {
    std::fprintf(stderr, "weft-perf: rank %d: weftCommDestroy failed: %s: %s\n", rank,
                 weftGetErrorString(r), weftGetLastError(nullptr));
    status = kExitFailure;
  }
  return status;
}
