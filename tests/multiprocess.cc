#include "multiprocess.h"

#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

namespace weft::test {
namespace {

struct SharedId {
  std::atomic<int> state;  // 0 waiting, 1 ready, 2 failed
  weftUniqueId id;
};

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

[[noreturn]] void runChild(int rank, int nranks, SharedId* shared, const LaunchOptions& options,
                           const std::function<int(RankContext&)>& body) {
  RankContext ctx{rank, nranks, {}, 0};
  if (options.makeId) {
    if (rank == 0) {
      weftResult_t rc = weftGetUniqueId(&shared->id);
      shared->state.store(rc == weftSuccess ? 1 : 2);
      if (rc != weftSuccess) {
        std::fprintf(stderr, "weftGetUniqueId failed: %s\n", weftGetLastError(nullptr));
        std::_Exit(3);
      }
    } else {
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (shared->state.load() == 0 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (shared->state.load() != 1) {
        std::fprintf(stderr, "rank %d: no unique id from rank 0\n", rank);
        std::_Exit(3);
      }
    }
    std::memcpy(&ctx.id, &shared->id, sizeof(ctx.id));
  }
  int rc = body(ctx);
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(rc != 0 ? rc : (ctx.failures > 0 ? 1 : 0));
}

}  // namespace

std::vector<RankOutcome> runRanks(int nranks, const std::function<int(RankContext&)>& body, LaunchOptions options) {
  SharedAcrossRanks<SharedId> sharedId;
  SharedId* shared = sharedId.get();
  std::vector<pid_t> pids(static_cast<size_t>(nranks), -1);
  std::vector<std::string> logs(static_cast<size_t>(nranks));
  std::fflush(stdout);
  std::fflush(stderr);
  for (int r = 0; r < nranks; ++r) {
    char path[] = "/tmp/weft-test-rank-XXXXXX";
    int fd = mkstemp(path);
    logs[static_cast<size_t>(r)] = path;
    pid_t pid = fork();
    if (pid == 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      close(fd);
      runChild(r, nranks, shared, options, body);
    }
    close(fd);
    pids[static_cast<size_t>(r)] = pid;
  }
  std::vector<RankOutcome> outcomes(static_cast<size_t>(nranks));
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(options.timeoutMs);
  int left = nranks;
  while (left > 0) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (int r = 0; r < nranks; ++r) {
        if (pids[static_cast<size_t>(r)] != pid) continue;
        auto& out = outcomes[static_cast<size_t>(r)];
        if (WIFEXITED(status)) out.exitCode = WEXITSTATUS(status);
        if (WIFSIGNALED(status)) out.signal = WTERMSIG(status);
        pids[static_cast<size_t>(r)] = -1;
        --left;
      }
      continue;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < nranks; ++r) {
        if (pids[static_cast<size_t>(r)] > 0) {
          kill(pids[static_cast<size_t>(r)], SIGKILL);
          outcomes[static_cast<size_t>(r)].output = "[killed by the test harness after its timeout]\n";
        }
      }
      while (waitpid(-1, nullptr, 0) > 0) {
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (int r = 0; r < nranks; ++r) {
    outcomes[static_cast<size_t>(r)].output += readFile(logs[static_cast<size_t>(r)]);
    unlink(logs[static_cast<size_t>(r)].c_str());
  }
  return outcomes;
}

std::string describeFailures(const std::vector<RankOutcome>& outcomes) {
  std::string out;
  for (size_t r = 0; r < outcomes.size(); ++r) {
    const auto& o = outcomes[r];
    if (o.exitCode == 0) continue;
    out += "rank " + std::to_string(r) +
           (o.signal ? " killed by signal " + std::to_string(o.signal) : " exited " + std::to_string(o.exitCode)) +
           ":\n" + o.output + "\n";
  }
  return out;
}

double processCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

weftComm_t rankComm(RankContext& ctx, int timeoutMs) { return rankComm(ctx, ctx.id, timeoutMs); }

weftComm_t rankComm(RankContext& ctx, const weftUniqueId& id, int timeoutMs) {
  weftConfig_t config = WEFT_CONFIG_INITIALIZER;
  config.timeoutMs = timeoutMs;
  weftComm_t comm = nullptr;
  RANK_WEFT(ctx, weftCommInitRankConfig(&comm, ctx.nranks, id, ctx.rank, &config));
  return comm;
}

void expectAllPassed(const std::vector<RankOutcome>& outcomes) {
  INFO(describeFailures(outcomes));
  for (const auto& o : outcomes) CHECK(o.exitCode == 0);
}

weftComm_t soloComm(RankContext& ctx) {
  weftUniqueId id;
  weftComm_t comm = nullptr;
  RANK_WEFT(ctx, weftGetUniqueId(&id));
  RANK_WEFT(ctx, weftCommInitRank(&comm, 1, id, 0));
  return comm;
}

int inForkedChild(const std::function<int()>& body) {
  const pid_t child = fork();
  if (child == 0) {
    alarm(10);
    _exit(body());
  }
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace weft::test
