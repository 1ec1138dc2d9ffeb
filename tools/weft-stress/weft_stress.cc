// weft-stress: random collectives, every one verified. Each iteration draws a collective (all
// of weft-perf's, or only all-reduce with -c allreduce), a data type, an op, a root, a count
// (log-uniform up to -m bytes), in place or not, and blocking or on a host stream, from a
// generator seeded by (seed, iteration), so every rank draws the same without talking. Inputs
// and the reference come from weft-perf's check pattern (exact for every type and op); outputs
// are poisoned first and guarded after their end. Start one process per rank with a launcher
// (weftrun, mpirun, torchrun-style); rank 0 prints the totals.
#include <getopt.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "weft-perf/check_data.h"
#include "weft-perf/collectives.h"
#include "weft-perf/perf_common.h"
#include "weft/weft.h"

namespace {

using weftperf::kExitFailure;
using weftperf::kExitOk;
using weftperf::kExitUsage;

constexpr size_t kGuardBytes = 256;
constexpr long kAgreeEvery = 16;  // with -t, the ranks agree on stopping every this many iterations

struct Options {
  long iterations = 1000;
  double seconds = 0;  // > 0: run until this much time has passed (overrides -i)
  unsigned long seed = 1;
  size_t maxBytes = size_t{4} << 20;
  const weftperf::Collective* only = nullptr;  // -c: one collective; nullptr: all of them
};

int usage(const char* message) {
  if (message != nullptr) std::fprintf(stderr, "weft-stress: %s\n", message);
  std::fprintf(message != nullptr ? stderr : stdout,
               "Usage: weft-stress [-i ITERATIONS] [-t SECONDS] [-s SEED] [-m MAXBYTES] [-c COLLECTIVE]\n"
               "Random verified collectives (collective, type, op, root, count, placement, blocking\n"
               "or host stream).\n"
               "  -i N   iterations (default 1000)      -t S  run for S seconds instead\n"
               "  -s N   seed (default 1)               -m SIZE  largest message (default 4M)\n"
               "  -c C   only this collective (allreduce, broadcast, reduce, allgather, reducescatter,\n"
               "         alltoall, sendrecv, gather, scatter; default: all of them)\n"
               "Exit status: 0 when every result was right, 1 otherwise, 2 bad command line.\n");
  return message != nullptr ? kExitUsage : kExitOk;
}

int parse(int argc, char** argv, Options* o) {
  int c;
  long value = 0;
  opterr = 0;  // the messages are ours
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0) return usage(nullptr);
  }
  while ((c = getopt(argc, argv, ":i:t:s:m:c:h")) != -1) {
    const std::string arg = optarg != nullptr ? optarg : "";
    switch (c) {
      case 'i':
        if (!weftperf::parseInt(arg, 1, 1000000000, &o->iterations)) return usage("-i needs an iteration count >= 1");
        break;
      case 't': {
        char* end = nullptr;
        o->seconds = std::strtod(arg.c_str(), &end);
        if (arg.empty() || *end != '\0' || !(o->seconds > 0 && o->seconds <= 86400)) {
          return usage("-t needs seconds in (0, 86400]");
        }
        break;
      }
      case 's':
        if (!weftperf::parseInt(arg, 0, 1L << 40, &value)) return usage("-s needs a seed >= 0");
        o->seed = static_cast<unsigned long>(value);
        break;
      case 'm':
        if (!weftperf::parseSize(arg, &o->maxBytes) || o->maxBytes == 0 || o->maxBytes > weftperf::kLargestSize) {
          return usage("-m needs a size from 1 byte to 1048576G");
        }
        break;
      case 'c':
        o->only = weftperf::findCollective(arg);
        if (o->only == nullptr) return usage("-c needs a collective name");
        break;
      case 'h':
        return usage(nullptr);
      case ':':
        return usage((std::string("option -") + static_cast<char>(optopt) + " needs a value").c_str());
      default:
        return usage((std::string("unknown option -") + static_cast<char>(optopt)).c_str());
    }
  }
  return optind < argc ? usage("unexpected argument") : -1;
}

struct Totals {
  int64_t iterations = 0, elements = 0, wrong = 0, outOfBounds = 0, failedCalls = 0;
};

class Stress {
 public:
  Stress(weftComm_t comm, int rank, int nranks, const Options& o)
      : comm_(comm), rank_(rank), nranks_(nranks), o_(o), send_(o.maxBytes + 64), recv_(o.maxBytes + 64 + kGuardBytes) {}


  bool check(weftResult_t rc, const char* what) {
    if (rc == weftSuccess) return true;
    std::fprintf(stderr, "weft-stress: rank %d: %s: %s: %s\n", rank_, what, weftGetErrorString(rc), weftGetLastError(comm_));
    ++totals_.failedCalls;
    return false;
  }

  // One random collective, checked. False when a call failed (the communicator is then unusable).
  bool iteration(long i, weftStream_t stream) {
    std::mt19937_64 rng(o_.seed * 1000003u + static_cast<unsigned long>(i));
    const auto& collectives = weftperf::allCollectives();
    const weftperf::Collective& coll = o_.only ? *o_.only : collectives[rng() % collectives.size()];
    const auto& types = weftperf::allDataTypes();
    const auto& ops = weftperf::allRedOps();
    const weftperf::DataType& type = types[rng() % types.size()];
    const weftperf::RedOp& op = ops[rng() % ops.size()];
    const int root = static_cast<int>(rng() % static_cast<unsigned>(nranks_));
    const size_t maxCount = o_.maxBytes / type.size;
    // Log-uniform counts, so small and large messages both come up often; sometimes 0.
    double exponent = std::uniform_real_distribution<double>(0, std::log2(static_cast<double>(maxCount) + 1))(rng);
    size_t count = rng() % 16 == 0 ? 0 : std::min(maxCount, static_cast<size_t>(std::exp2(exponent)));
    if (coll.blocked) count -= count % static_cast<size_t>(nranks_);
    const bool inPlace = rng() % 2 == 0 && coll.id != weftperf::CollectiveId::SendRecv;
    const bool onStream = rng() % 4 == 0;
    const size_t offset = (rng() % 4) * type.size;  // unaligned buffers too

    const weftperf::BufferLayout layout = weftperf::layoutFor(coll, inPlace, count, nranks_, rank_, root);
    char* arena = recv_.data() + offset;
    char* send = inPlace ? arena + layout.sendBegin * type.size : send_.data() + offset;
    char* out = arena + layout.recvBegin * type.size;
    char* guard = arena + layout.guardBegin * type.size;
    weftperf::CheckPattern pattern(type, coll.reduces ? op.id : weftperf::kMovedOnly, nranks_);
    std::memset(arena, weftperf::kPoisonByte, layout.guardBegin * type.size + kGuardBytes);
    pattern.fill(send, rank_, layout.sendElements);

    weftStream_t s = onStream ? stream : nullptr;
    const weftperf::CallArgs args{coll, send, out, count, type, op.id, root, comm_, rank_, nranks_, inPlace, s};
    if (!check(weftperf::runCollective(args), coll.name)) return false;
    if (onStream && !check(weftStreamSynchronize(stream), "weftStreamSynchronize")) return false;

    totals_.iterations++;
    size_t wrong = 0;
    if (coll.hasResult(rank_, root)) {
      totals_.elements += static_cast<int64_t>(layout.recvElements);
      wrong = pattern.countMismatches(out, layout.recvElements, [&](size_t e) {
        return weftperf::expectedElement(coll, pattern, count, nranks_, rank_, root, e);
      });
    }
    totals_.wrong += static_cast<int64_t>(wrong);
    for (size_t g = 0; g < kGuardBytes; ++g) {
      totals_.outOfBounds += static_cast<unsigned char>(guard[g]) != weftperf::kPoisonByte;
    }
    if (wrong != 0) {
      std::fprintf(stderr, "weft-stress: rank %d iteration %ld: %zu of %zu wrong (%s %s %s root %d, %s, %s)\n", rank_, i,
                   wrong, layout.recvElements, coll.name, type.name, op.name, root, inPlace ? "in place" : "out of place",
                   onStream ? "stream" : "blocking");
    }
    return true;
  }

  int run() {
    weftStream_t stream = nullptr;
    if (!check(weftStreamCreate(&stream), "weftStreamCreate")) return kExitFailure;
    const auto start = std::chrono::steady_clock::now();
    bool ok = true;
    for (long i = 0; ok; ++i) {
      if (o_.seconds > 0) {
        // The ranks agree every kAgreeEvery iterations, after the first ones: a run checks
        // something, however short its time. The first rank whose clock says so stops them
        // all, at the same i.
        if (i > 0 && i % kAgreeEvery == 0) {
          int32_t stop = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >= o_.seconds;
          ok = check(weftAllReduce(&stop, &stop, 1, weftInt32, weftMax, comm_, nullptr), "agreeing to stop");
          if (!ok || stop) break;
        }
      } else if (i >= o_.iterations) {
        break;
      }
      ok = iteration(i, stream);
    }
    weftStreamDestroy(stream);
    int64_t sums[5] = {totals_.iterations, totals_.elements, totals_.wrong, totals_.outOfBounds, totals_.failedCalls};
    if (ok) ok = check(weftAllReduce(sums, sums, 5, weftInt64, weftSum, comm_, nullptr), "summing the totals");
    if (rank_ == 0 && ok) {
      std::printf("weft-stress: %d ranks, seed %lu: %lld iterations (per rank), %lld elements checked (all ranks), %lld wrong, "
                  "%lld out of bounds, %lld failed calls\n",
                  nranks_, o_.seed, static_cast<long long>(sums[0] / nranks_), static_cast<long long>(sums[1]),
                  static_cast<long long>(sums[2]), static_cast<long long>(sums[3]), static_cast<long long>(sums[4]));
    }
    if (ok) {  // a rank that failed at once would have the launcher stop rank 0 before its totals are out
      std::fflush(nullptr);
      int32_t token = 0;
      ok = check(weftAllReduce(&token, &token, 1, weftInt32, weftSum, comm_, nullptr), "meeting after the totals");
    }
    return ok && sums[2] == 0 && sums[3] == 0 && sums[4] == 0 ? kExitOk : kExitFailure;
  }

 private:
  weftComm_t comm_;
  int rank_, nranks_;
  const Options& o_;
  std::vector<char> send_, recv_;
  Totals totals_;
};

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (int status = parse(argc, argv, &options); status >= 0) return status;
  weftComm_t comm = nullptr;
  if (weftCommInitFromEnv(&comm) != weftSuccess) {
    std::fprintf(stderr, "weft-stress: init: %s\n", weftGetLastError(nullptr));
    return kExitFailure;
  }
  int rank = 0, nranks = 0;
  weftCommUserRank(comm, &rank);
  weftCommCount(comm, &nranks);
  int status = kExitFailure;
  try {
    status = Stress(comm, rank, nranks, options).run();
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "weft-stress: rank %d: out of memory for buffers of %zu bytes (lower -m)\n", rank,
                 options.maxBytes);
  }
  if (status == kExitOk) weftCommDestroy(comm);
  else weftCommAbort(comm);
  return status;
}
