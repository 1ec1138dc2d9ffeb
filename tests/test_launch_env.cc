// weftCommInitFromEnv under each launcher's environment: torchrun's (MASTER_ADDR/PORT),
// WEFT_COMM_ID, Open MPI's and Slurm's with no address (the one-host rendezvous), and the
// errors for a missing or inconsistent environment. Ranks are real processes; each sets the
// variables its launcher would have set, then initializes and all-reduces.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "core/launch_env.h"
#include "core/local_rendezvous.h"
#include "multiprocess.h"

using namespace weft::test;

namespace {

using Env = std::map<std::string, std::string>;

// A port that was free a moment ago on loopback.
int freePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// Whether this machine has IPv6 loopback (containers often have none).
bool hasIpv6Loopback() {
  int fd = socket(AF_INET6, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in6 addr{};
  addr.sin6_family = AF_INET6;
  addr.sin6_addr = in6addr_loopback;
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

// Forks a process that publishes a local id at `path` as its rank 0 and lives on until killed;
// returns its pid once the file is there (-1 if it could not publish).
pid_t publishAndLinger(const std::string& path) {
  int done[2];
  if (pipe(done) != 0) return -1;
  const pid_t child = fork();
  if (child == 0) {
    weft::core::UniqueIdContents id;
    id.root = weft::transport::SocketAddress::parse("127.0.0.1:" + std::to_string(freePort())).value();
    id.secret = weft::core::newSecret().value();
    const char ok = weft::core::publishLocalId(path, id).isOk() ? 1 : 0;
    (void)!write(done[1], &ok, 1);
    pause();
    _exit(0);
  }
  close(done[1]);
  char ok = 0;
  const bool published = read(done[0], &ok, 1) == 1 && ok == 1;
  close(done[0]);
  if (published) return child;
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  return -1;
}

// Runs nranks processes, each with the environment envFor(rank), through init + all-reduce +
// destroy, `rounds` times in a row (as a program that makes its world communicator again).
void runWithEnvironment(int nranks, const std::function<Env(int)>& envFor, int rounds = 1) {
  LaunchOptions options;
  options.makeId = false;
  expectAllPassed(runRanks(
      nranks,
      [&](RankContext& ctx) {
        for (const auto& [key, value] : envFor(ctx.rank)) setenv(key.c_str(), value.c_str(), 1);
        if (auto delay = std::getenv("TEST_START_AFTER_MS")) usleep(static_cast<useconds_t>(std::atoi(delay)) * 1000);
        for (int round = 0; round < rounds; ++round) {
          weftComm_t comm = nullptr;
          RANK_WEFT(ctx, weftCommInitFromEnv(&comm));
          if (comm == nullptr) return 1;  // the rounds are out of step from here on
          int rank = -1, count = 0;
          RANK_WEFT(ctx, weftCommUserRank(comm, &rank));
          RANK_WEFT(ctx, weftCommCount(comm, &count));
          RANK_CHECK(ctx, rank == ctx.rank && count == ctx.nranks, "rank %d of %d", rank, count);
          // Only the last round all-reduces: in the others a rank is done as soon as its init
          // is answered, and comes back while the root may still be answering the others. A
          // rank in another round would change the sum.
          if (round == rounds - 1) {
            int32_t v = ctx.rank + 1000 * round;
            RANK_WEFT(ctx, weftAllReduce(&v, &v, 1, weftInt32, weftSum, comm, nullptr));
            RANK_CHECK(ctx, v == ctx.nranks * (ctx.nranks - 1) / 2 + 1000 * round * ctx.nranks, "sum %d", v);
          }
          RANK_WEFT(ctx, weftCommDestroy(comm));
        }
        return 0;
      },
      options));
}

// A fresh job id so that runs never meet each other's rendezvous files.
std::string jobId() { return std::to_string(getpid()) + "-" + std::to_string(freePort()); }

// Slurm's environment for `rank` of a 2-rank step 0 of job `job` on one host, plus `extra`.
Env slurmEnv(int rank, const std::string& job, Env extra = {}) {
  extra.insert({{"SLURM_PROCID", std::to_string(rank)}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_NUM_TASKS", "2"},
                {"SLURM_STEP_NUM_NODES", "1"},
                {"SLURM_JOB_ID", job}, {"SLURM_STEP_ID", "0"}});
  return extra;
}

}  // namespace

TEST_CASE("launch: torchrun's environment", "[launch][multiprocess]") {
  std::string port = std::to_string(freePort());
  runWithEnvironment(3, [&](int rank) {
    return Env{{"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port},      {"RANK", std::to_string(rank)},
               {"WORLD_SIZE", "3"},          {"LOCAL_RANK", std::to_string(rank)}, {"LOCAL_WORLD_SIZE", "3"},
               {"WEFT_SECRET", std::string(64, 'a')}};
  });
}

TEST_CASE("launch: torchrun's environment with an IPv6 MASTER_ADDR, unbracketed as torchrun takes it",
          "[launch][multiprocess]") {
  if (!hasIpv6Loopback()) {
    WARN("no IPv6 loopback on this machine: not tested");
    return;
  }
  std::string port = std::to_string(freePort());
  runWithEnvironment(2, [&](int rank) {
    return Env{{"MASTER_ADDR", "::1"}, {"MASTER_PORT", port}, {"RANK", std::to_string(rank)}, {"WORLD_SIZE", "2"}};
  });
}

TEST_CASE("launch: one environment initializes again and again in the same processes", "[launch][multiprocess]") {
  // A rank answered first re-initialized while the last root still listened on the port (or
  // its id file still lay there): it joined the old rendezvous, and the rounds fell out of step.
  SECTION("torchrun's, one port for every round") {
    std::string port = std::to_string(freePort());
    runWithEnvironment(
        2, [&](int rank) {
          return Env{{"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port}, {"RANK", std::to_string(rank)},
                     {"WORLD_SIZE", "2"}, {"WEFT_TIMEOUT_MS", "5000"}};
        },
        12);
  }
  SECTION("Slurm's on one host, one id file for every round") {
    std::string job = jobId();
    runWithEnvironment(
        2, [&](int rank) {
          return slurmEnv(rank, job, {{"WEFT_TIMEOUT_MS", "5000"}});
        },
        12);
  }
}

TEST_CASE("launch: a failed rendezvous is retried at once with the same port", "[launch][multiprocess]") {
  // Rank 1 first miscounts the ranks, which fails the rendezvous; both then initialize again
  // with the same port. The failed root lingers to tell latecomers why, but must neither hold
  // the port against rank 0's new root nor tell the retrying rank 1 the old failure.
  for (int laterRank : {1, 0}) {
    DYNAMIC_SECTION("rank " << laterRank << " retries a moment after the other") {
      const std::string port = std::to_string(freePort());
      LaunchOptions options;
      options.makeId = false;
      expectAllPassed(runRanks(
          2,
          [&](RankContext& ctx) {
            setenv("MASTER_ADDR", "127.0.0.1", 1);
            setenv("MASTER_PORT", port.c_str(), 1);
            setenv("RANK", std::to_string(ctx.rank).c_str(), 1);
            setenv("WORLD_SIZE", ctx.rank == 1 ? "3" : "2", 1);
            setenv("WEFT_TIMEOUT_MS", "20000", 1);
            weftComm_t comm = nullptr;
            RANK_CHECK(ctx, weftCommInitFromEnv(&comm) == weftInvalidUsage, "the miscounted init: %s",
                       weftGetLastError(nullptr));
            if (ctx.rank == laterRank) usleep(500 * 1000);
            setenv("WORLD_SIZE", "2", 1);
            RANK_WEFT(ctx, weftCommInitFromEnv(&comm));
            if (comm == nullptr) return 1;
            int32_t v = ctx.rank + 1;
            RANK_WEFT(ctx, weftAllReduce(&v, &v, 1, weftInt32, weftSum, comm, nullptr));
            RANK_CHECK(ctx, v == 3, "sum %d", v);
            RANK_WEFT(ctx, weftCommDestroy(comm));
            return 0;
          },
          options));
    }
  }
}

TEST_CASE("launch: WEFT_COMM_ID names the root", "[launch][multiprocess]") {
  std::string root = "127.0.0.1:" + std::to_string(freePort());
  runWithEnvironment(2, [&](int rank) {
    return Env{{"WEFT_COMM_ID", root}, {"RANK", std::to_string(rank)}, {"WORLD_SIZE", "2"}};
  });
}

TEST_CASE("launch: Open MPI's environment on one host, no address given", "[launch][multiprocess]") {
  std::string job = jobId();
  runWithEnvironment(4, [&](int rank) {
    return Env{{"OMPI_COMM_WORLD_RANK", std::to_string(rank)}, {"OMPI_COMM_WORLD_SIZE", "4"},
               {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}, {"OMPI_MCA_ess_base_jobid", job}};
  });
}

TEST_CASE("launch: weftrun's ranks under an outer mpirun take weftrun's rank, not Open MPI's",
          "[launch][multiprocess]") {
  std::string port = std::to_string(freePort());
  runWithEnvironment(2, [&](int rank) {
    return Env{{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"},
               {"MASTER_ADDR", "127.0.0.1"},  {"MASTER_PORT", port},         {"RANK", std::to_string(rank)},
               {"WORLD_SIZE", "2"},           {"WEFT_LAUNCHER", "weftrun"},  {"WEFT_SECRET", std::string(64, 'b')}};
  });
}

TEST_CASE("launch: Slurm's environment on one host, no address given", "[launch][multiprocess]") {
  std::string job = jobId();
  runWithEnvironment(2, [&](int rank) {
    return slurmEnv(rank, job);
  });
}

TEST_CASE("launch: a rendezvous file left by a dead rank 0 is passed over", "[launch][multiprocess]") {
  // An earlier run's rank 0 published its id and died before removing the file; this run's
  // rank 1 comes first and must wait for the new rank 0 rather than dial the dead root.
  std::string job = jobId();
  const std::string path = weft::core::localRendezvousPath("slurm-" + job + ".0");
  pid_t dead = fork();
  if (dead == 0) {
    weft::core::UniqueIdContents stale;
    stale.root = weft::transport::SocketAddress::parse("127.0.0.1:" + std::to_string(freePort())).value();
    stale.secret = weft::core::newSecret().value();
    _exit(weft::core::publishLocalId(path, stale).isOk() ? 0 : 1);
  }
  int status = -1;
  waitpid(dead, &status, 0);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  runWithEnvironment(2, [&](int rank) {
    Env env = slurmEnv(rank, job, {{"WEFT_TIMEOUT_MS", "10000"}});
    if (rank == 0) env["TEST_START_AFTER_MS"] = "1000";
    return env;
  });
  unlink(path.c_str());
}

TEST_CASE("launch: a live job's rendezvous file is not taken over by another job of the same name",
          "[launch][multiprocess]") {
  // Two jobs given one name: the second's rank 0 used to replace the first's id file, and
  // ranks of both jobs joined one communicator, exchanging each other's data as success.
  std::string job = jobId();
  const std::string path = weft::core::localRendezvousPath("slurm-" + job + ".0");
  const pid_t other = publishAndLinger(path);
  REQUIRE(other > 0);
  LaunchOptions options;
  options.makeId = false;
  auto outcomes = runRanks(
      1,
      [&](RankContext& ctx) {
        for (const auto& [key, value] : slurmEnv(0, job, {{"WEFT_TIMEOUT_MS", "5000"}})) {
          setenv(key.c_str(), value.c_str(), 1);
        }
        weftComm_t comm = nullptr;
        RANK_CHECK(ctx, weftCommInitFromEnv(&comm) == weftInvalidUsage, "init beside a live job of the same name");
        RANK_CHECK(ctx, contains(weftGetLastError(nullptr), "another job with the same name"), "%s",
                   weftGetLastError(nullptr));
        return 0;
      },
      options);
  kill(other, SIGKILL);
  waitpid(other, nullptr, 0);
  unlink(path.c_str());
  expectAllPassed(outcomes);
}

TEST_CASE("launch: a rendezvous file whose pid now belongs to a later process is passed over", "[launch][multiprocess]") {
  // A rank 0 killed during init leaves its file; once its pid is handed to another process,
  // that process is alive but is not the writer: it started after the file was written.
  std::string job = jobId();
  const std::string path = weft::core::localRendezvousPath("slurm-" + job + ".0");
  const pid_t later = publishAndLinger(path);
  REQUIRE(later > 0);
  const timespec hourAgo[2] = {{time(nullptr) - 3600, 0}, {time(nullptr) - 3600, 0}};
  REQUIRE(utimensat(AT_FDCWD, path.c_str(), hourAgo, 0) == 0);  // the file, written before `later` started
  runWithEnvironment(2, [&](int rank) {
    return slurmEnv(rank, job, {{"WEFT_TIMEOUT_MS", "10000"}});
  });
  kill(later, SIGKILL);
  waitpid(later, nullptr, 0);
  unlink(path.c_str());
}

TEST_CASE("launch: a FIFO at the rendezvous path is an error, not a hang", "[launch][multiprocess]") {
  // Someone made a FIFO where rank 0 will publish its id; opening it for reading would wait for
  // a writer forever, before any deadline is looked at.
  std::string job = jobId();
  const std::string path = weft::core::localRendezvousPath("slurm-" + job + ".0");
  REQUIRE(mkfifo(path.c_str(), 0600) == 0);
  LaunchOptions options;
  options.makeId = false;
  options.timeoutMs = 30000;
  auto outcomes = runRanks(
      1,
      [&](RankContext& ctx) {
        for (const auto& [key, value] : slurmEnv(1, job, {{"WEFT_TIMEOUT_MS", "5000"}})) {
          setenv(key.c_str(), value.c_str(), 1);
        }
        weftComm_t comm = nullptr;
        RANK_CHECK(ctx, weftCommInitFromEnv(&comm) == weftSystemError, "init over a FIFO");
        RANK_CHECK(ctx, std::strstr(weftGetLastError(nullptr), "not a private Weft id file") != nullptr, "%s",
                   weftGetLastError(nullptr));
        return 0;
      },
      options);
  unlink(path.c_str());
  expectAllPassed(outcomes);
}

TEST_CASE("launch: a missing or inconsistent environment is a clear error", "[launch][multiprocess]") {
  LaunchOptions options;
  options.makeId = false;
  auto outcomes = runRanks(
      1,
      [](RankContext& ctx) {
        for (const char* key : {"RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "WEFT_COMM_ID",
                                "MASTER_ADDR", "MASTER_PORT"}) {
          unsetenv(key);
        }
        weftComm_t comm = nullptr;
        RANK_CHECK(ctx, weftCommInitFromEnv(&comm) == weftInvalidUsage, "no launcher");
        RANK_CHECK(ctx, std::strstr(weftGetLastError(nullptr), "no launcher environment") != nullptr, "%s",
                   weftGetLastError(nullptr));
        setenv("RANK", "5", 1);
        setenv("WORLD_SIZE", "2", 1);
        RANK_CHECK(ctx, weftCommInitFromEnv(&comm) == weftInvalidArgument, "RANK 5 of 2");
        RANK_CHECK(ctx, std::strstr(weftGetLastError(nullptr), "RANK") != nullptr, "%s", weftGetLastError(nullptr));
        setenv("RANK", "0", 1);
        setenv("WORLD_SIZE", "two", 1);
        RANK_CHECK(ctx, weftCommInitFromEnv(&comm) == weftInvalidArgument, "WORLD_SIZE two");
        setenv("WORLD_SIZE", "4", 1);
        setenv("LOCAL_WORLD_SIZE", "2", 1);  // two hosts, but nobody named the root
        RANK_CHECK(ctx, weftCommInitFromEnv(&comm) == weftInvalidUsage, "several hosts, no root");
        RANK_CHECK(ctx, std::strstr(weftGetLastError(nullptr), "WEFT_COMM_ID") != nullptr, "%s",
                   weftGetLastError(nullptr));
        // Slurm's two nodes, though SLURM_STEP_NUM_TASKS (the step's total) equals the world.
        for (const char* key : {"RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"}) unsetenv(key);
        setenv("SLURM_PROCID", "0", 1);
        setenv("SLURM_NTASKS", "4", 1);
        setenv("SLURM_STEP_NUM_TASKS", "4", 1);
        setenv("SLURM_STEP_NUM_NODES", "2", 1);
        setenv("SLURM_JOB_ID", "77", 1);
        RANK_CHECK(ctx, weftCommInitFromEnv(&comm) == weftInvalidUsage, "Slurm: several hosts, no root");
        RANK_CHECK(ctx, contains(weftGetLastError(nullptr), "WEFT_COMM_ID"), "%s", weftGetLastError(nullptr));
        unsetenv("SLURM_PROCID");
        setenv("RANK", "0", 1);
        setenv("WORLD_SIZE", "4", 1);
        // One host, but nothing names the job: every such job would meet at one rendezvous file.
        setenv("LOCAL_WORLD_SIZE", "4", 1);
        unsetenv("TORCHELASTIC_RUN_ID");
        RANK_CHECK(ctx, weftCommInitFromEnv(&comm) == weftInvalidUsage, "a job with no name");
        RANK_CHECK(ctx, contains(weftGetLastError(nullptr), "nothing in the environment names this job"), "%s",
                   weftGetLastError(nullptr));
        // Port 0 would have rank 0 bind a port nobody else knows, and every rank wait out its
        // deadline; a sign is no port at all.
        setenv("WEFT_COMM_ID", "127.0.0.1:0", 1);
        RANK_CHECK(ctx, weftCommInitFromEnv(&comm) == weftInvalidArgument, "port 0");
        RANK_CHECK(ctx, std::strstr(weftGetLastError(nullptr), "has port 0") != nullptr, "%s", weftGetLastError(nullptr));
        for (const char* port : {"-0", "+80", " 80", "80 ", "123456"}) {
          setenv("WEFT_COMM_ID", ("127.0.0.1:" + std::string(port)).c_str(), 1);
          RANK_CHECK(ctx, weftCommInitFromEnv(&comm) == weftInvalidArgument, "port \"%s\"", port);
          RANK_CHECK(ctx, std::strstr(weftGetLastError(nullptr), "invalid port") != nullptr, "%s",
                     weftGetLastError(nullptr));
        }
        setenv("WEFT_COMM_ID", ("127.0.0.1:" + std::to_string(freePort())).c_str(), 1);
        std::string signs;  // sscanf's %2x would read "-1" as a byte
        for (int i = 0; i < 32; ++i) signs += "-1";
        for (const std::string& secret : {std::string(63, 'a'), signs, " " + std::string(63, 'f'),
                                          std::string(62, '0') + "0g"}) {
          setenv("WEFT_SECRET", secret.c_str(), 1);
          RANK_CHECK(ctx, weftCommInitFromEnv(&comm) == weftInvalidArgument, "WEFT_SECRET \"%s\"", secret.c_str());
          RANK_CHECK(ctx, std::strstr(weftGetLastError(nullptr), "WEFT_SECRET must be 64 hex digits") != nullptr, "%s",
                     weftGetLastError(nullptr));
        }
        unsetenv("WEFT_SECRET");
        setenv("WEFT_COMM_ID", "no-such-host.invalid:1", 1);
        RANK_CHECK(ctx, weftCommInitFromEnv(&comm) != weftSuccess, "unresolvable root");
        RANK_CHECK(ctx, comm == nullptr, "comm set on failure");
        return 0;
      },
      options);
  expectAllPassed(outcomes);  // the one rank
}
