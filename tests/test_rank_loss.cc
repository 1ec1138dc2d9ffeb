// A rank that is gone by the time the others reach it: killed after joining the rendezvous, or
// exited after init. The others must fail at once, naming it, rather than wait out their timeout
// and blame a healthy rank.
#include <catch2/catch.hpp>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "core/bootstrap_wire.h"
#include "core/peer_mesh.h"
#include "core/unique_id.h"
#include "multiprocess.h"
#include "transport/socket/socket_util.h"

using namespace weft;
using namespace weft::test;

namespace {

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// An all-reduce whose peer, rank 1, is gone: it must fail with weftRemoteError naming rank 1
// and `cause`, soon rather than at the timeout. Then the communicator is aborted.
int expectPeerLost(RankContext& ctx, weftComm_t comm, float* data, size_t count, const char* cause) {
  const auto start = std::chrono::steady_clock::now();
  weftResult_t rc = weftAllReduce(data, data, count, weftFloat32, weftSum, comm, nullptr);
  const char* why = weftGetLastError(comm);
  RANK_CHECK(ctx, rc == weftRemoteError, "all-reduce gave %s: %s", weftGetErrorString(rc), why);
  RANK_CHECK(ctx, contains(why, "rank 1") && contains(why, cause), "the error: %s", why);
  RANK_CHECK(ctx, secondsSince(start) < 10, "the all-reduce took %.1f s to fail", secondsSince(start));
  weftCommAbort(comm);
  return 0;
}

// What a rank does in the rendezvous up to its hello, then its death: the root has its hello
// with the job's secret, and a socket that hangs up.
int joinAndDie(RankContext& ctx) {
  auto id = core::decodeUniqueId(ctx.id);
  RANK_CHECK(ctx, id.isOk(), "decode: %s", id.status().message().c_str());
  if (!id.isOk()) return 1;
  auto fd = transport::connectTo(id.value().root, Deadline::afterMs(5000));
  RANK_CHECK(ctx, fd.isOk(), "connect to the root: %s", fd.status().message().c_str());
  if (!fd.isOk()) return 1;
  core::RankHello hello{};
  hello.magic = core::kHelloMagic;
  hello.version = core::kProtocolVersion;
  std::memcpy(hello.secret, id.value().secret.data(), sizeof(hello.secret));
  hello.rank = ctx.rank;
  hello.nranks = ctx.nranks;
  hello.timeoutMs = 20000;
  hello.pid = static_cast<uint32_t>(getpid());
  auto listen = transport::SocketAddress::parse("127.0.0.1:9");
  hello.listen = transport::toWire(listen.value());
  std::snprintf(hello.hostName, sizeof(hello.hostName), "doomed");
  RANK_CHECK(ctx, transport::sendAll(fd.value().get(), &hello, sizeof(hello), Deadline::afterMs(2000)).isOk(),
             "send the hello");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the root reads it before the hang-up
  return ctx.failures == 0 ? 0 : 1;
}

// Leaves this process not one descriptor to spare: the soft limit (and the hard one, with
// hardToo) at the highest open descriptor, the gaps below it filled. Returns the soft limit.
rlim_t leaveNoDescriptorSpare(RankContext& ctx, bool hardToo) {
  int highest = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    highest = std::max(highest, std::stoi(entry.path().filename().string()));
  }
  rlimit limit{};
  RANK_CHECK(ctx, getrlimit(RLIMIT_NOFILE, &limit) == 0, "getrlimit: %s", std::strerror(errno));
  limit.rlim_cur = static_cast<rlim_t>(highest + 1);
  if (hardToo) limit.rlim_max = limit.rlim_cur;
  RANK_CHECK(ctx, setrlimit(RLIMIT_NOFILE, &limit) == 0, "setrlimit: %s", std::strerror(errno));
  while (dup(0) >= 0) {
  }
  return limit.rlim_cur;
}

}  // namespace

TEST_CASE("bootstrap: a rank gone after joining fails the rendezvous for all, named", "[bootstrap][multiprocess]") {
  auto outcomes = runRanks(3, [](RankContext& ctx) {
    if (ctx.rank == 1) return joinAndDie(ctx);
    if (ctx.rank == 2) std::this_thread::sleep_for(std::chrono::milliseconds(600));  // after rank 1 went
    weftConfig_t config = WEFT_CONFIG_INITIALIZER;
    config.timeoutMs = 20000;
    weftComm_t comm = nullptr;
    const auto start = std::chrono::steady_clock::now();
    weftResult_t rc = weftCommInitRankConfig(&comm, ctx.nranks, ctx.id, ctx.rank, &config);
    const char* why = weftGetLastError(nullptr);
    RANK_CHECK(ctx, rc == weftRemoteError, "init gave %s: %s", weftGetErrorString(rc), why);
    RANK_CHECK(ctx, contains(why, "rank 1 (doomed") && contains(why, "hung up"), "the error: %s", why);
    RANK_CHECK(ctx, secondsSince(start) < 10, "init took %.1f s to fail", secondsSince(start));
    if (comm != nullptr) weftCommDestroy(comm);
    return 0;
  });
  INFO(describeFailures(outcomes));
  for (const auto& o : outcomes) CHECK(o.exitCode == 0);
}

TEST_CASE("peer mesh: a peer gone after init is reported at once, not after the timeout", "[bootstrap][multiprocess]") {
  auto outcomes = runRanks(2, [](RankContext& ctx) {
    setenv("WEFT_TRANSPORT", "socket", 1);
    weftComm_t comm = rankComm(ctx, 20000);
    if (comm == nullptr) return 1;
    if (ctx.rank == 1) _exit(0);  // gone without a word, as a crash would go; rank 0 connects to it
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    float x = 1;
    return expectPeerLost(ctx, comm, &x, 1, "refused");
  });
  INFO(describeFailures(outcomes));
  for (const auto& o : outcomes) CHECK(o.exitCode == 0);
}

TEST_CASE("peer mesh: a peer that hangs up after some of its streams is named at once, with the count",
          "[bootstrap][multiprocess]") {
  // Rank 0 (a forked stand-in) connects the first of its two streams to rank 1 and exits, as a
  // rank that crashed while connecting would. Rank 1 must not wait for the second until its
  // timeout and then say that rank 0 never connected.
  auto listen = transport::SocketAddress::parse("127.0.0.1:0");
  REQUIRE(listen.isOk());
  transport::SocketAddress bound;
  auto listenFd = transport::listenOn(listen.value(), &bound);
  REQUIRE(listenFd.isOk());
  const core::Secret secret = core::newSecret().value();
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    auto fd = transport::connectTo(bound, Deadline::afterMs(5000));
    if (!fd.isOk()) _exit(1);
    core::PeerHello hello{core::kPeerHelloMagic, core::kProtocolVersion, 0, {}, 0, 1, 2, 0};
    std::memcpy(hello.secret, secret.data(), sizeof(hello.secret));
    _exit(transport::sendAll(fd.value().get(), &hello, sizeof(hello), Deadline::afterMs(5000)).isOk() ? 0 : 2);
  }
  core::Rendezvous rendezvous;
  rendezvous.listenFd = listenFd.take();
  rendezvous.peers.resize(2);
  rendezvous.peers[0].hostName = "stand-in";
  rendezvous.peers[0].pid = static_cast<uint32_t>(child);
  rendezvous.peers[1].listen = bound;
  core::PeerMesh mesh(1, std::move(rendezvous), secret, 2, transport::ShmOptions{},
                      {plan::Transport::Socket, plan::Transport::Self}, {}, nullptr);
  auto connection = mesh.connection(0, Deadline::afterMs(8000));
  int status = 0;
  waitpid(child, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  REQUIRE_FALSE(connection.isOk());
  INFO(connection.status().message());
  CHECK(connection.status().code() == weftRemoteError);
  CHECK(contains(connection.status().message().c_str(), "hung up after connecting 1 of its 2 streams"));
}

TEST_CASE("peer mesh: a rank out of file descriptors says so, not that its peer never came", "[bootstrap][multiprocess]") {
  auto outcomes = runRanks(2, [](RankContext& ctx) {
    setenv("WEFT_TRANSPORT", "socket", 1);
    weftComm_t comm = rankComm(ctx, 3000);
    if (comm == nullptr) return 1;
    if (ctx.rank == 1) {
      // Not one descriptor to spare, nor room to raise the limit: the peer connections, made by
      // the first collective, cannot be.
      leaveNoDescriptorSpare(ctx, /*hardToo=*/true);
    }
    float x = 1;
    weftResult_t rc = weftAllReduce(&x, &x, 1, weftFloat32, weftSum, comm, nullptr);
    RANK_CHECK(ctx, rc != weftSuccess, "an all-reduce with rank 1 out of descriptors succeeded");
    if (ctx.rank == 1) {
      RANK_CHECK(ctx, contains(weftGetLastError(comm), "Too many open files"), "the error: %s", weftGetLastError(comm));
    }
    weftCommAbort(comm);
    return 0;
  });
  INFO(describeFailures(outcomes));
  for (const auto& o : outcomes) CHECK(o.exitCode == 0);
}

TEST_CASE("peer mesh: a rank whose soft limit on open files is too low for its streams raises it",
          "[bootstrap][multiprocess]") {
  // Eight streams a pair, and rank 1 with not one descriptor to spare under its soft limit but
  // room under its hard one: the mesh raises the soft limit, and the all-reduce runs.
  rlimit start{};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &start) == 0);
  if (start.rlim_max != RLIM_INFINITY && start.rlim_max < 4096) {
    WARN("skipped: the hard limit on open files (" << start.rlim_max << ") leaves no room to raise the soft one");
    return;
  }
  auto outcomes = runRanks(2, [](RankContext& ctx) {
    setenv("WEFT_TRANSPORT", "socket", 1);
    setenv("WEFT_SOCKET_NSTREAMS", "8", 1);
    weftComm_t comm = rankComm(ctx, 10000);
    if (comm == nullptr) return 1;
    rlimit limit{};
    RANK_CHECK(ctx, getrlimit(RLIMIT_NOFILE, &limit) == 0, "getrlimit: %s", std::strerror(errno));
    if (ctx.rank == 1) {
      limit.rlim_cur = leaveNoDescriptorSpare(ctx, /*hardToo=*/false);
    }
    float x = 1;
    RANK_WEFT(ctx, weftAllReduce(&x, &x, 1, weftFloat32, weftSum, comm, nullptr));
    RANK_CHECK(ctx, x == 2, "the sum is %g", x);
    rlimit after{};
    RANK_CHECK(ctx, getrlimit(RLIMIT_NOFILE, &after) == 0, "getrlimit: %s", std::strerror(errno));
    if (ctx.rank == 1) {
      RANK_CHECK(ctx, after.rlim_cur > limit.rlim_cur, "the soft limit stayed at %llu",
                 static_cast<unsigned long long>(after.rlim_cur));
    } else {
      RANK_CHECK(ctx, after.rlim_cur == limit.rlim_cur, "rank 0's soft limit moved from %llu to %llu",
                 static_cast<unsigned long long>(limit.rlim_cur), static_cast<unsigned long long>(after.rlim_cur));
    }
    weftCommDestroy(comm);
    return 0;
  });
  INFO(describeFailures(outcomes));
  for (const auto& o : outcomes) CHECK(o.exitCode == 0);
}

namespace {

// Rank 1 forks a worker (as a DataLoader would) and exits without a word: the worker keeps the
// rank's ends of its sockets open, so its death shows the survivor no EOF. The survivor must see
// the process gone instead, in the ring (1 MiB) and the smallest call (4 bytes: over shared
// memory, through the arena), rather than wait out its 20 s timeout.
void expectForkedWorkerHidesNoDeath(const char* transport) {
  for (const size_t count : {size_t{1} << 18, size_t{1}}) {
    DYNAMIC_SECTION(transport << ", " << count * 4 << " bytes") {
      auto outcomes = runRanks(2, [count, transport](RankContext& ctx) {
        setenv("WEFT_TRANSPORT", transport, 1);
        weftComm_t comm = rankComm(ctx, 20000);
        if (comm == nullptr) return 1;
        std::vector<float> v(count, 1.0f);
        RANK_WEFT(ctx, weftAllReduce(v.data(), v.data(), count, weftFloat32, weftSum, comm, nullptr));
        if (ctx.rank == 1) {
          if (fork() == 0) {  // the worker: lives on, its output nowhere (the harness reads the rank's)
            for (int fd : {0, 1, 2}) close(fd);
            std::this_thread::sleep_for(std::chrono::seconds(15));
            _exit(0);
          }
          _exit(0);  // gone without a word, the worker holding its sockets
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        return expectPeerLost(ctx, comm, v.data(), count, "exited");
      });
      INFO(describeFailures(outcomes));
      for (const auto& o : outcomes) CHECK(o.exitCode == 0);
    }
  }
}

}  // namespace

TEST_CASE("shm: a rank gone while a child it forked holds its sockets is reported at once", "[shm][multiprocess]") {
  expectForkedWorkerHidesNoDeath("shm");
}

TEST_CASE("socket: a rank gone while a child it forked holds its sockets is reported at once",
          "[socket][multiprocess]") {
  expectForkedWorkerHidesNoDeath("socket");
}

TEST_CASE("socket: a rank that exited with its sends still queued is not lost: its peer, far behind, gets them all",
          "[socket][multiprocess]") {
  // Rank 1 only sends, so it finishes and exits while most of its messages wait in the kernel's
  // buffers (its closed end delivers them). Rank 0 takes them late and slowly, looking at a
  // process that is gone: that alone must not fail the receives.
  constexpr int kMessages = 400;
  constexpr size_t kBytes = 2048;
  auto outcomes = runRanks(2, [](RankContext& ctx) {
    setenv("WEFT_TRANSPORT", "socket", 1);
    weftComm_t comm = rankComm(ctx, 20000);
    if (comm == nullptr) return 1;
    std::vector<unsigned char> message(kBytes);
    if (ctx.rank == 1) {
      for (int m = 0; m < kMessages; ++m) {
        std::fill(message.begin(), message.end(), static_cast<unsigned char>(m));
        RANK_WEFT(ctx, weftSend(message.data(), kBytes, weftUint8, 0, comm, nullptr));
      }
      RANK_WEFT(ctx, weftCommDestroy(comm));
      return 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    int wrong = 0;
    for (int m = 0; m < kMessages && ctx.failures == 0; ++m) {
      RANK_WEFT(ctx, weftRecv(message.data(), kBytes, weftUint8, 1, comm, nullptr));
      wrong += std::any_of(message.begin(), message.end(), [m](unsigned char b) { return b != static_cast<unsigned char>(m); });
      if (m % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    RANK_CHECK(ctx, wrong == 0, "%d of %d messages wrong", wrong, kMessages);
    RANK_WEFT(ctx, weftCommDestroy(comm));
    return 0;
  });
  INFO(describeFailures(outcomes));
  for (const auto& o : outcomes) CHECK(o.exitCode == 0);
}
