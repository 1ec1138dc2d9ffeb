// Shared memory with process_vm_readv on (WEFT_SHM_REMOTE_READ_MIN_BYTES): a receiver reads the
// sender's own buffer. A sender whose send timed out returns, and may refill that buffer at
// once; a receiver that comes later must then fail, not deliver the refilled bytes as the
// message (it did before senders withdrew their sends). Ranks are real processes; the steps are
// ordered through a shared page, not by sleeping.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "multiprocess.h"
#include "transport/shm/shm_setup.h"

using namespace weft::test;

namespace {

// What the two ranks tell each other. Lives in a MAP_SHARED page made before the fork.
struct Handoff {
  std::atomic<int> senderPid{0};
  std::atomic<int> remoteReadOk{-1};  // rank 1's own process_vm_readv of rank 0: 1 worked, 0 not
  std::atomic<int> refilled{0};       // rank 0's send failed and it wrote new data in the buffer
  std::atomic<int> readDone{0};       // rank 1 has made its receive
  uint64_t probe = 0x5eed;
};

// Waits (30 s at most) until `flag` is nonzero; false on time out.
bool awaitFlag(const std::atomic<int>& flag) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (flag.load() == 0) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace

TEST_CASE("shm: a late receiver does not read a buffer its timed-out sender reused", "[shm][faults]") {
  SharedAcrossRanks<Handoff> shared;
  Handoff* handoff = shared.get();
  setenv("WEFT_TRANSPORT", "shm", 1);
  setenv("WEFT_SHM_REMOTE_READ_MIN_BYTES", "0", 1);
  auto outcomes = runRanks(2, [handoff](RankContext& ctx) {
    if (ctx.rank == 0) handoff->senderPid.store(getpid());
    weftConfig_t config = WEFT_CONFIG_INITIALIZER;
    config.timeoutMs = 3000;  // how long rank 0's send waits before it fails
    weftComm_t comm = nullptr;
    RANK_WEFT(ctx, weftCommInitRankConfig(&comm, ctx.nranks, ctx.id, ctx.rank, &config));
    if (comm == nullptr) return 1;
    const int peer = 1 - ctx.rank;
    std::vector<float> buf(1 << 18, 1.0f);
    RANK_WEFT(ctx, weftGroupStart());  // connects the pair, both ways
    RANK_WEFT(ctx, weftSend(buf.data(), 1, weftFloat32, peer, comm, nullptr));
    RANK_WEFT(ctx, weftRecv(buf.data() + 1, 1, weftFloat32, peer, comm, nullptr));
    RANK_WEFT(ctx, weftGroupEnd());
    if (ctx.rank == 1) {
      const auto probeAt = reinterpret_cast<uint64_t>(&handoff->probe);  // same address in rank 0
      const bool ok = weft::transport::canReadRemote(handoff->senderPid.load(), probeAt, handoff->probe);
      handoff->remoteReadOk.store(ok ? 1 : 0);
    } else {
      while (handoff->remoteReadOk.load() < 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (handoff->remoteReadOk.load() == 0) {  // nothing to test: large messages are copied
      RANK_WEFT(ctx, weftCommAbort(comm));
      return 0;
    }
    if (ctx.rank == 0) {
      std::fill(buf.begin(), buf.end(), 1.0f);
      const weftResult_t rc = weftSend(buf.data(), buf.size(), weftFloat32, 1, comm, nullptr);
      RANK_CHECK(ctx, rc != weftSuccess, "the send completed with no receiver");
      std::fill(buf.begin(), buf.end(), 7.0f);  // the caller's buffer is its own again
      handoff->refilled.store(1);
      RANK_CHECK(ctx, awaitFlag(handoff->readDone), "rank 1 never received");  // alive while it reads
    } else {
      RANK_CHECK(ctx, awaitFlag(handoff->refilled), "rank 0's send never returned");
      std::fill(buf.begin(), buf.end(), 0.0f);
      const weftResult_t rc = weftRecv(buf.data(), buf.size(), weftFloat32, 0, comm, nullptr);
      const std::string error = weftGetLastError(comm);
      handoff->readDone.store(1);
      const auto sevens = std::count(buf.begin(), buf.end(), 7.0f);
      RANK_CHECK(ctx, rc == weftRemoteError, "rc %d (%zd of the sender's later bytes received): %s", rc,
                 static_cast<ssize_t>(sevens), error.c_str());
      RANK_CHECK(ctx, error.find("withdrew") != std::string::npos, "error: %s", error.c_str());
    }
    RANK_WEFT(ctx, weftCommAbort(comm));
    return 0;
  });
  unsetenv("WEFT_SHM_REMOTE_READ_MIN_BYTES");
  unsetenv("WEFT_TRANSPORT");
  const bool tested = handoff->remoteReadOk.load() == 1;
  INFO(describeFailures(outcomes));
  for (const auto& o : outcomes) CHECK(o.exitCode == 0);
  if (!tested) WARN("process_vm_readv is not permitted between the ranks here: nothing to withdraw, not tested");
}
