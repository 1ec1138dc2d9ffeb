// Strangers at the bootstrap root: a port scanner, garbage, a hello with a forged or stale
// secret, a connection that never speaks. Each is dropped and the real job completes.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/bootstrap.h"
#include "core/bootstrap_wire.h"
#include "core/flood_eviction.h"
#include "core/unique_id.h"
#include "multiprocess.h"
#include "transport/socket/socket_util.h"

using namespace weft;
using namespace weft::test;

namespace {

// Whether the root closes `fd` (recv gives 0 or an error) within `ms`.
bool closedByPeer(int fd, int ms) {
  char byte;
  Status s = transport::recvAll(fd, &byte, 1, Deadline::afterMs(ms));
  return s.code() == weftRemoteError;
}

core::RankHello forgedHello(const core::Secret& secret) {
  core::RankHello hello{};
  hello.magic = core::kHelloMagic;
  hello.version = core::kProtocolVersion;
  std::memcpy(hello.secret, secret.data(), sizeof(hello.secret));
  hello.rank = 0;  // claims a real rank's place
  hello.nranks = 2;
  hello.timeoutMs = 30000;
  std::snprintf(hello.hostName, sizeof(hello.hostName), "intruder");
  return hello;
}

// The stranger: rank 2 of the test's processes, not a member of the 2-rank job.
int stranger(RankContext& ctx) {
  auto id = core::decodeUniqueId(ctx.id);
  RANK_CHECK(ctx, id.isOk(), "decode: %s", id.status().message().c_str());
  if (!id.isOk()) return 1;
  const transport::SocketAddress root = id.value().root;
  auto connect = [&] { return transport::connectTo(root, Deadline::afterMs(5000)).take(); };

  {  // a port scanner: connect, leave
    transport::UniqueFd fd = connect();
  }
  {  // garbage, then silence
    transport::UniqueFd fd = connect();
    const char junk[] = "GET / HTTP/1.0\r\n\r\n";
    RANK_CHECK(ctx, transport::sendAll(fd.get(), junk, sizeof(junk) - 1, Deadline::afterMs(1000)).isOk(), "send junk");
  }
  core::Secret wrong = id.value().secret;
  wrong[7] ^= 1;
  {  // a forged hello: right shape, wrong secret; the root must hang up
    transport::UniqueFd fd = connect();
    core::RankHello hello = forgedHello(wrong);
    RANK_CHECK(ctx, transport::sendAll(fd.get(), &hello, sizeof(hello), Deadline::afterMs(1000)).isOk(), "send hello");
    RANK_CHECK(ctx, closedByPeer(fd.get(), 5000), "the root kept a connection with a wrong secret");
  }
  {  // a stale id: a secret from another job
    auto other = core::newSecret();
    transport::UniqueFd fd = connect();
    core::RankHello hello = forgedHello(other.value());
    RANK_CHECK(ctx, transport::sendAll(fd.get(), &hello, sizeof(hello), Deadline::afterMs(1000)).isOk(), "send hello");
    RANK_CHECK(ctx, closedByPeer(fd.get(), 5000), "the root kept a connection with a stale secret");
  }
  {  // a rank of this job built with an older Weft: the right secret, its version's shorter hello
    transport::UniqueFd fd = connect();
    core::RankHello hello = forgedHello(id.value().secret);
    hello.version = core::kProtocolVersion - 1;
    RANK_CHECK(ctx, transport::sendAll(fd.get(), &hello, 248, Deadline::afterMs(1000)).isOk(), "send hello");
    core::RootReply reply{};
    Status got = transport::recvAll(fd.get(), &reply, sizeof(reply), Deadline::afterMs(5000));
    RANK_CHECK(ctx, got.isOk(), "no answer to another version's hello: %s", got.message().c_str());
    Status said = core::checkRootReply(reply, 2, "root");
    RANK_CHECK(ctx, said.code() == weftInvalidUsage && contains(said.message().c_str(), "protocol version"),
               "the answer: %s", said.message().c_str());
  }
  {  // a huge claimed size where a hello belongs: only sizeof(RankHello) is ever read
    transport::UniqueFd fd = connect();
    std::vector<uint8_t> flood(64 * 1024, 0xff);
    (void)transport::sendAll(fd.get(), flood.data(), flood.size(), Deadline::afterMs(1000));
    RANK_CHECK(ctx, closedByPeer(fd.get(), 5000), "the root kept a flooding connection");
  }
  return 0;
}

}  // namespace

TEST_CASE("bootstrap: strangers are dropped and the job completes", "[bootstrap][security][multiprocess]") {
  auto outcomes = runRanks(3, [](RankContext& ctx) {
    if (ctx.rank == 2) return stranger(ctx);
    // Let the stranger reach the root first, and keep a silent connection open throughout.
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    weftConfig_t config = WEFT_CONFIG_INITIALIZER;
    config.timeoutMs = 20000;
    weftComm_t comm = nullptr;
    RANK_WEFT(ctx, weftCommInitRankConfig(&comm, 2, ctx.id, ctx.rank, &config));
    if (comm == nullptr) return 1;
    int64_t v = ctx.rank + 1;
    RANK_WEFT(ctx, weftAllReduce(&v, &v, 1, weftInt64, weftSum, comm, nullptr));
    RANK_CHECK(ctx, v == 3, "sum %ld", static_cast<long>(v));
    RANK_WEFT(ctx, weftCommDestroy(comm));
    return 0;
  });
  INFO(describeFailures(outcomes));
  for (const auto& o : outcomes) CHECK(o.exitCode == 0);
  // The root logged what it dropped.
  CHECK(outcomes[0].output.find("wrong secret") != std::string::npos);
}

TEST_CASE("bootstrap: a silent connection does not delay the job", "[bootstrap][security][multiprocess]") {
  // The stranger holds its connection open, saying nothing, until both ranks are through init:
  // a root that waited on it would hold init for its 10 s hello deadline. Init itself takes up
  // to a few seconds under a sanitizer beside another test (topology discovery).
  SharedAcrossRanks<std::atomic<int>> shared;
  auto outcomes = runRanks(3, [initialized = shared.get()](RankContext& ctx) {
    if (ctx.rank == 2) {
      auto id = core::decodeUniqueId(ctx.id);
      auto fd = transport::connectTo(id.value().root, Deadline::afterMs(5000));
      RANK_CHECK(ctx, fd.isOk(), "connect");
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (initialized->load() < 2 && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      return 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    auto start = std::chrono::steady_clock::now();
    weftComm_t comm = nullptr;
    RANK_WEFT(ctx, weftCommInitRank(&comm, 2, ctx.id, ctx.rank));
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    initialized->fetch_add(1);
    RANK_CHECK(ctx, seconds < 6.0, "init took %.1f s behind a silent stranger", seconds);
    if (comm != nullptr) RANK_WEFT(ctx, weftCommDestroy(comm));
    return 0;
  });
  INFO(describeFailures(outcomes));
  for (const auto& o : outcomes) CHECK(o.exitCode == 0);
}

TEST_CASE("bootstrap: the root waits as long as the joining ranks' timeout, not the default", "[bootstrap][multiprocess]") {
  // The id is made with WEFT_TIMEOUT_MS=4000 (room for rank 0's init to reach the root under
  // sanitizers), the ranks init with a 20 s timeout and rank 1 comes 5 s late: the root's life
  // is the ranks' timeout, counted from the first one's hello.
  setenv("WEFT_TIMEOUT_MS", "4000", 1);
  auto outcomes = runRanks(2, [](RankContext& ctx) {
    unsetenv("WEFT_TIMEOUT_MS");
    if (ctx.rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(5000));
    weftConfig_t config = WEFT_CONFIG_INITIALIZER;
    config.timeoutMs = 20000;
    weftComm_t comm = nullptr;
    RANK_WEFT(ctx, weftCommInitRankConfig(&comm, ctx.nranks, ctx.id, ctx.rank, &config));
    if (comm == nullptr) return 1;
    float x = 1;
    RANK_WEFT(ctx, weftAllReduce(&x, &x, 1, weftFloat32, weftSum, comm, nullptr));
    RANK_CHECK(ctx, x == 2, "sum %g", x);
    RANK_WEFT(ctx, weftCommDestroy(comm));
    return 0;
  });
  unsetenv("WEFT_TIMEOUT_MS");
  INFO(describeFailures(outcomes));
  for (const auto& o : outcomes) CHECK(o.exitCode == 0);
}

TEST_CASE("bootstrap: a root out of descriptors waits, it does not spin", "[bootstrap]") {
  // accept() failing with EMFILE leaves the connection queued and the listener readable: the
  // root must back off rather than poll it at full speed (in a child, whose limits we lower).
  pid_t child = fork();
  if (child == 0) {
    weftUniqueId id;
    if (weftGetUniqueId(&id) != weftSuccess) _exit(2);
    const auto root = core::decodeUniqueId(id).value().root;
    rlimit limit{};
    getrlimit(RLIMIT_NOFILE, &limit);
    limit.rlim_cur = 64;
    setrlimit(RLIMIT_NOFILE, &limit);
    std::vector<int> filler;
    for (int fd; (fd = open("/dev/null", O_RDONLY)) >= 0;) filler.push_back(fd);
    close(filler.back());  // room for the connecting socket only: the root's accept fails
    auto connected = transport::connectTo(root, Deadline::afterMs(5000));
    if (!connected.isOk()) _exit(3);
    const double before = processCpuSeconds();
    std::this_thread::sleep_for(std::chrono::seconds(1));
    const double used = processCpuSeconds() - before;
    std::fprintf(stderr, "%.3f s of CPU in 1 s\n", used);
    _exit(used < 0.3 ? 0 : 1);
  }
  int status = -1;
  waitpid(child, &status, 0);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("flood eviction: the oldest connection of the host that holds the most makes room", "[bootstrap]") {
  struct Pending {
    transport::SocketAddress from;
  };
  auto at = [](const char* text) { return Pending{transport::SocketAddress::parse(text).value()}; };
  // 10.0.0.2 holds three: its oldest goes, though 10.0.0.1's is older.
  std::vector<Pending> pending{at("10.0.0.1:5000"), at("10.0.0.2:1"), at("10.0.0.2:2"), at("10.0.0.1:5001"),
                               at("10.0.0.2:3")};
  CHECK(core::connectionToEvict(pending) == 1);
  // A tie: the oldest of all.
  pending = {at("10.0.0.3:9"), at("10.0.0.1:7")};
  CHECK(core::connectionToEvict(pending) == 0);
  // Ports do not make sources; families do, and an IPv6 /64 is one source.
  pending = {at("[::1]:1"), at("127.0.0.1:1"), at("127.0.0.1:2"), at("[::1]:2"), at("[::1]:3")};
  CHECK(core::connectionToEvict(pending) == 0);
  pending = {at("[2001:db8::1]:1"), at("[2001:db8:0:1::1]:1"), at("[2001:db8:0:1::2]:1"), at("[2001:db8::2]:1"),
             at("[2001:db8:0:1::3]:1")};
  CHECK(core::connectionToEvict(pending) == 1);
  // IPv4 addresses mapped into IPv6 stay one host each.
  pending = {at("[::ffff:10.0.0.1]:1"), at("[::ffff:10.0.0.2]:1"), at("[::ffff:10.0.0.2]:2")};
  CHECK(core::connectionToEvict(pending) == 1);
  pending = {at("127.0.0.1:1")};
  CHECK(core::connectionToEvict(pending) == 0);
}

namespace {

// Whether `fd` is still open with nothing to read: the root sends nothing before a whole hello.
bool openAndQuiet(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 0;
}

// A TCP connection to `to` from the local address `from` (any port).
transport::UniqueFd connectFrom(const char* from, const transport::SocketAddress& to) {
  transport::UniqueFd fd(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in local{};
  local.sin_family = AF_INET;
  ::inet_pton(AF_INET, from, &local.sin_addr);
  if (!fd.valid() || ::bind(fd.get(), reinterpret_cast<const sockaddr*>(&local), sizeof(local)) != 0 ||
      ::connect(fd.get(), to.sockaddrPtr(), to.length) != 0) {
    return transport::UniqueFd();
  }
  return fd;
}

constexpr int kFlood = 1100;  // more silent connections than the root keeps (1024)

}  // namespace

TEST_CASE("bootstrap: a flood from one host does not evict a connection from another",
          "[bootstrap][security][multiprocess]") {
  // Rank 1 stands for a real rank that has connected from 127.0.0.1 and stalls half-way through
  // its hello; rank 2 then floods the root from 127.0.0.2. The root dropped its oldest silent
  // connection to make room, which was rank 1's.
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  const rlim_t wanted = 2 * kFlood + 256;
  if (limit.rlim_cur < wanted) {
    limit.rlim_cur = std::min(wanted, limit.rlim_max);
    setrlimit(RLIMIT_NOFILE, &limit);
  }
  if (limit.rlim_cur < wanted) {
    WARN("the descriptor limit (" << limit.rlim_max << ") is below a flood's " << wanted << ": not tested");
    return;
  }
  setenv("WEFT_SOCKET_IFNAME", "lo", 1);  // the root on 127.0.0.1, which 127.0.0.2 reaches
  auto outcomes = runRanks(3, [](RankContext& ctx) {
    const transport::SocketAddress root = core::decodeUniqueId(ctx.id).value().root;
    if (ctx.rank == 0) {  // hosts the root, which waits for ranks that never come
      std::this_thread::sleep_for(std::chrono::seconds(4));
      return 0;
    }
    RANK_CHECK(ctx, root.family() == AF_INET, "the root is not on IPv4 loopback: %s", root.toString().c_str());
    if (ctx.rank == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // after rank 1 has connected
      std::vector<transport::UniqueFd> flood;
      for (int i = 0; i < kFlood; ++i) flood.push_back(connectFrom("127.0.0.2", root));
      RANK_CHECK(ctx, std::ranges::all_of(flood, [](const auto& fd) { return fd.valid(); }), "a flood connect failed");
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // held until rank 1 has looked
      return 0;
    }
    transport::UniqueFd fd = connectFrom("127.0.0.1", root);
    RANK_CHECK(ctx, fd.valid(), "connect: %s", std::strerror(errno));
    // Half a hello with the wrong secret: the rest comes after the flood.
    core::Secret wrong = core::decodeUniqueId(ctx.id).value().secret;
    wrong[0] ^= 1;
    const core::RankHello hello = forgedHello(wrong);
    const auto* bytes = reinterpret_cast<const char*>(&hello);
    const size_t half = sizeof(hello) / 2;
    RANK_CHECK(ctx, transport::sendAll(fd.get(), bytes, half, Deadline::afterMs(1000)).isOk(), "send");
    std::this_thread::sleep_for(std::chrono::milliseconds(2000));
    RANK_CHECK(ctx, openAndQuiet(fd.get()), "the root dropped this connection to make room for the flood");
    RANK_CHECK(ctx, transport::sendAll(fd.get(), bytes + half, sizeof(hello) - half, Deadline::afterMs(1000)).isOk(),
               "send the rest");
    RANK_CHECK(ctx, closedByPeer(fd.get(), 2000), "the root kept a hello with the wrong secret");
    return 0;
  });
  unsetenv("WEFT_SOCKET_IFNAME");
  INFO(describeFailures(outcomes));
  for (const auto& o : outcomes) CHECK(o.exitCode == 0);
  const std::string& rootLog = outcomes[0].output;
  CHECK(rootLog.find("dropping the one from 127.0.0.2:") != std::string::npos);  // the flood was evicted
  CHECK(rootLog.find("dropping the one from 127.0.0.1:") == std::string::npos);
  CHECK(rootLog.find("dropped a connection from 127.0.0.1:") != std::string::npos);  // its hello: wrong secret
}

namespace {

// The IPv4 addresses this process listens on: its sockets (/proc/self/fd) in LISTEN state in
// /proc/self/net/tcp, with 0.0.0.0 read as the loopback address.
std::vector<transport::SocketAddress> ownListeners() {
  std::set<std::string> inodes;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const std::string target = std::filesystem::read_symlink(entry.path(), ec).string();
    if (!ec && target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
  }
  std::vector<transport::SocketAddress> found;
  std::ifstream table("/proc/self/net/tcp");
  std::string line;
  std::getline(table, line);  // the header
  while (std::getline(table, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
    fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode;
    if (state != "0A" || !inodes.contains(inode)) continue;
    uint32_t ip = static_cast<uint32_t>(std::stoul(local.substr(0, 8), nullptr, 16));  // as stored: network order
    const int port = static_cast<int>(std::stoul(local.substr(9), nullptr, 16));
    in_addr address{ip == 0 ? htonl(INADDR_LOOPBACK) : ip};
    auto parsed = transport::SocketAddress::parse(std::string(inet_ntoa(address)) + ":" + std::to_string(port));
    if (parsed.isOk()) found.push_back(parsed.value());
  }
  return found;
}

}  // namespace

TEST_CASE("peer mesh: connections that never say hello do not hold up a rank's peers",
          "[bootstrap][security][multiprocess]") {
  // Rank 1 accepts rank 0's connection on first use. Before that, it opens two connections to
  // its own listener and says nothing on them: each used to hold rank 1's accept loop for the
  // 5 s a hello may take, with rank 0's connection queued behind.
  auto outcomes = runRanks(2, [](RankContext& ctx) {
    setenv("WEFT_SOCKET_IFNAME", "lo", 1);
    weftComm_t comm = nullptr;
    RANK_WEFT(ctx, weftCommInitRank(&comm, 2, ctx.id, ctx.rank));
    if (comm == nullptr) return 1;
    std::vector<transport::UniqueFd> silent;
    if (ctx.rank == 1) {
      const auto listeners = ownListeners();
      RANK_CHECK(ctx, !listeners.empty(), "found no listening socket of this rank");
      for (int i = 0; i < 2; ++i) {
        for (const auto& address : listeners) {
          auto fd = transport::connectTo(address, Deadline::afterMs(2000));
          RANK_CHECK(ctx, fd.isOk(), "connect to %s: %s", address.toString().c_str(), fd.status().message().c_str());
          if (fd.isOk()) silent.push_back(fd.take());
        }
      }
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));  // after rank 1's strangers
    }
    const auto start = std::chrono::steady_clock::now();
    int64_t v = ctx.rank + 1;
    RANK_WEFT(ctx, weftAllReduce(&v, &v, 1, weftInt64, weftSum, comm, nullptr));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    RANK_CHECK(ctx, v == 3, "sum %ld", static_cast<long>(v));
    RANK_CHECK(ctx, seconds < 4.0, "the first all-reduce took %.1f s behind silent connections", seconds);
    RANK_WEFT(ctx, weftCommDestroy(comm));
    return 0;
  });
  INFO(describeFailures(outcomes));
  for (const auto& o : outcomes) CHECK(o.exitCode == 0);
}

TEST_CASE("bootstrap: a rank's placement reaches its peers whole, and values out of range as unknown", "[bootstrap]") {
  plan::RankPlacement mine;
  mine.numaNode = 1;
  mine.gpu = 3;
  mine.preferredNic = 1;
  mine.nicCount = 2;
  mine.cpus = 16;
  mine.cores = 8;
  mine.sharedMemory = false;
  mine.sharedMemoryOnly = true;
  mine.cacheBytes = size_t{48} << 20;
  mine.privateCacheBytes = size_t{1280} << 10;
  std::vector<core::PeerRecord> records(2);
  records[0].placement = core::toWire(mine);
  // A record with counts no rank sends: taken as unknown, never as negative sizes.
  records[1].placement = core::toWire(mine);
  records[1].placement.cores = -5;
  records[1].placement.cpus = -1;
  records[1].placement.preferredNic = 7;  // past its NICs
  auto address = transport::SocketAddress::parse("127.0.0.1:1234");
  REQUIRE(address.isOk());
  for (auto& r : records) r.listen = transport::toWire(address.value());
  auto peers = core::decodePeerRecords(records, "test");
  REQUIRE(peers.isOk());
  const plan::RankPlacement& got = peers.value()[0].placement;
  CHECK(got.numaNode == 1);
  CHECK(got.gpu == 3);
  CHECK(got.preferredNic == 1);
  CHECK(got.nicCount == 2);
  CHECK(got.cpus == 16);
  CHECK(got.cores == 8);
  CHECK_FALSE(got.sharedMemory);
  CHECK(got.sharedMemoryOnly);
  CHECK(got.cacheBytes == mine.cacheBytes);
  CHECK(got.privateCacheBytes == mine.privateCacheBytes);
  const plan::RankPlacement& odd = peers.value()[1].placement;
  CHECK(odd.cores == 0);
  CHECK(odd.cpus == 0);
  CHECK(odd.preferredNic == -1);
  // Counts and sizes past what the fields hold are sent as the most they hold, never wrapped.
  plan::RankPlacement vast = mine;
  vast.cores = 1 << 20;
  vast.cpus = 1 << 21;
  vast.privateCacheBytes = size_t{1} << 50;
  const core::WirePlacement w = core::toWire(vast);
  CHECK(w.cores == INT16_MAX);
  CHECK(w.cpus == INT16_MAX);
  CHECK(w.privateCacheKiB == UINT32_MAX);
  CHECK(w.cacheKiB == (48u << 10));
}
