// Runs test bodies as real ranks: forked processes that talk over real transports. The
// parent stays single-threaded; rank 0 makes the unique id and shares it through a shared page.
#pragma once

#include <sys/mman.h>

#include <cstring>
#include <functional>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "weft/weft.h"

namespace weft::test {

struct RankContext {
  int rank;
  int nranks;
  weftUniqueId id;          // made by rank 0 with weftGetUniqueId (when makeId)
  int failures = 0;
};

struct RankOutcome {
  int exitCode = -1;   // -1 when killed by a signal
  int signal = 0;
  std::string output;  // what the rank printed (stdout and stderr)
};

struct LaunchOptions {
  bool makeId = true;
  int timeoutMs = 120000;  // the whole group is killed after this
};

// A T (atomics: flags and pids the ranks tell each other) in a MAP_SHARED page, made before
// runRanks forks so that the parent and every rank see the one object; unmapped when it goes.
template <typename T>
class SharedAcrossRanks {
 public:
  SharedAcrossRanks() {
    void* page = mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) throw std::runtime_error("mmap of a shared page failed");
    value_ = new (page) T{};
  }
  ~SharedAcrossRanks() { munmap(value_, sizeof(T)); }
  SharedAcrossRanks(const SharedAcrossRanks&) = delete;
  SharedAcrossRanks& operator=(const SharedAcrossRanks&) = delete;
  T* get() const { return value_; }

 private:
  T* value_;
};

// Forks nranks processes running body(ctx); a rank's exit code is body's return value, or 1
// when it recorded failures with RANK_CHECK.
std::vector<RankOutcome> runRanks(int nranks, const std::function<int(RankContext&)>& body,
                                  LaunchOptions options = {});

// "rank 1 exited 1: <output>" for each rank that did not exit 0; empty when all passed.
std::string describeFailures(const std::vector<RankOutcome>& outcomes);

// This rank's communicator over `id` (the job's own by default), its calls timing out after
// timeoutMs; NULL, with a failure recorded, when init fails.
weftComm_t rankComm(RankContext& ctx, int timeoutMs = 30000);
weftComm_t rankComm(RankContext& ctx, const weftUniqueId& id, int timeoutMs = 30000);

// Whether `text` (which may be NULL) contains `part`: for checking error sentences.
inline bool contains(const char* text, const char* part) {
  return text != nullptr && std::strstr(text, part) != nullptr;
}

// Runs body() in a child made by fork, under a 10 s alarm (a deadlock there fails instead of
// hanging), and returns its exit status: body's return value, 128 + the signal that ended it,
// or -1 where the fork failed.
int inForkedChild(const std::function<int()>& body);

// A Catch2 check that every rank exited 0, showing the failed ranks' output otherwise.
void expectAllPassed(const std::vector<RankOutcome>& outcomes);

// A one-rank communicator made inside a rank (each rank process makes its own); NULL, with a
// failure recorded, when it cannot be made.
weftComm_t soloComm(RankContext& ctx);

// CPU time (user and system) this process has used so far, in seconds: a wait that sleeps
// uses little of its wall time, one that polls uses all of it.
double processCpuSeconds();

}  // namespace weft::test

// In a rank: records a failure with its location and message, and carries on.
#define RANK_CHECK(ctx, cond, ...)                                                       \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      (ctx).failures++;                                                                  \
      std::fprintf(stderr, "rank %d: %s:%d: check failed: %s: ", (ctx).rank, __FILE__,  \
                   __LINE__, #cond);                                                     \
      std::fprintf(stderr, __VA_ARGS__);                                                 \
      std::fprintf(stderr, "\n");                                                        \
    }                                                                                    \
  } while (0)

// In a rank: a Weft call that must succeed.
#define RANK_WEFT(ctx, call)                                                             \
  do {                                                                                   \
    weftResult_t rank_weft_rc_ = (call);                                                 \
    RANK_CHECK(ctx, rank_weft_rc_ == weftSuccess, "%s -> %s: %s", #call,                \
               weftGetErrorString(rank_weft_rc_), weftGetLastError(nullptr));            \
  } while (0)
