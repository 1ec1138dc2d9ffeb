// Every collective across real processes, against references computed here: every dtype (and
// op where it reduces) x ranks {1,2,3,4,5,8} x counts {0,1,odd,large} x in place and out of
// place, with poisoned outputs and a guard byte past every output. The binary runs once per
// transport (tests/CMakeLists.txt); algorithms are forced in turn with WEFT_ALGO.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "element_codec.h"
#include "multiprocess.h"

using namespace weft::test;

namespace {

constexpr char kPoison = 0x5a;
const std::vector<int> kRankCounts = {1, 2, 3, 4, 5, 8};
const std::vector<size_t> kCounts = {0, 1, 7, 1001};

// Byte k of the data that `who` contributes (for the collectives that only move bytes).
char pattern(int who, size_t k) { return static_cast<char>(who * 37 + static_cast<int>(k % 251) * 11 + 5); }
void fill(char* p, size_t bytes, int who) {
  for (size_t k = 0; k < bytes; ++k) p[k] = pattern(who, k);
}
// Index of the first byte that differs from who's pattern, or bytes when none does.
size_t firstWrong(const char* p, size_t bytes, int who) {
  for (size_t k = 0; k < bytes; ++k) {
    if (p[k] != pattern(who, k)) return k;
  }
  return bytes;
}
// A poisoned buffer with a guard byte past `bytes`.
std::vector<char> poisoned(size_t bytes) { return std::vector<char>(bytes + 1, kPoison); }

struct Call {
  RankContext& ctx;
  weftComm_t comm;
  weftDataType_t type;
  size_t count;
  bool inPlace;
  size_t bytes() const { return count * typeSize(type); }
  int n() const { return ctx.nranks; }
  int r() const { return ctx.rank; }
};

#define CALL_CHECK(c, cond, what, ...)                                                                       \
  RANK_CHECK((c).ctx, cond, "type %d count %zu %s: " what, (int)(c).type, (c).count,                          \
             (c).inPlace ? "in place" : "out of place", ##__VA_ARGS__)

void checkBroadcast(const Call& c, int root) {
  const size_t bytes = c.bytes();
  std::vector<char> send(bytes + 1), recv = poisoned(bytes);
  char* out = recv.data();
  if (c.inPlace) {
    if (c.r() == root) fill(out, bytes, root);
    RANK_WEFT(c.ctx, weftBcast(out, c.count, c.type, root, c.comm, nullptr));
  } else {
    fill(send.data(), bytes, root);
    // Only the root's sendbuff is read: elsewhere pass one that must not matter.
    const void* source = c.r() == root ? send.data() : nullptr;
    RANK_WEFT(c.ctx, weftBroadcast(source, out, c.count, c.type, root, c.comm, nullptr));
  }
  CALL_CHECK(c, firstWrong(out, bytes, root) == bytes, "broadcast from %d wrong at byte %zu", root,
             firstWrong(out, bytes, root));
  CALL_CHECK(c, out[bytes] == kPoison, "broadcast wrote past the end");
}

void checkReduce(const Call& c, weftRedOp_t op, int root) {
  std::vector<char> send(c.bytes() + 1, kPoison), recv = poisoned(c.bytes());
  for (size_t i = 0; i < c.count; ++i) storeValue(send.data(), i, c.type, inputValue(c.type, op, c.r(), c.n(), i));
  char* out = c.inPlace ? send.data() : recv.data();
  RANK_WEFT(c.ctx, weftReduce(send.data(), out, c.count, c.type, op, root, c.comm, nullptr));
  if (c.r() == root) {
    size_t wrong = 0;
    for (size_t i = 0; i < c.count; ++i) wrong += !resultMatches(out, i, c.type, op, c.n());
    CALL_CHECK(c, wrong == 0, "reduce op %d to %d: %zu wrong", op, root, wrong);
  } else if (!c.inPlace) {
    const bool untouched = std::all_of(recv.begin(), recv.end(), [](char x) { return x == kPoison; });
    CALL_CHECK(c, untouched, "reduce wrote a non-root's recvbuff");
  }
  CALL_CHECK(c, out[c.bytes()] == kPoison, "reduce wrote past the end");
}

void checkAllGather(const Call& c) {
  const size_t bytes = c.bytes(), n = static_cast<size_t>(c.n());
  std::vector<char> send(bytes + 1), recv = poisoned(n * bytes);
  const size_t mine = static_cast<size_t>(c.r()) * bytes;
  if (c.inPlace) {
    fill(recv.data() + mine, bytes, c.r());
    RANK_WEFT(c.ctx, weftAllGather(recv.data() + mine, recv.data(), c.count, c.type, c.comm, nullptr));
  } else {
    fill(send.data(), bytes, c.r());
    RANK_WEFT(c.ctx, weftAllGather(send.data(), recv.data(), c.count, c.type, c.comm, nullptr));
  }
  for (int b = 0; b < c.n(); ++b) {
    const char* block = recv.data() + static_cast<size_t>(b) * bytes;
    CALL_CHECK(c, firstWrong(block, bytes, b) == bytes, "all-gather block %d wrong at byte %zu", b,
               firstWrong(block, bytes, b));
  }
  CALL_CHECK(c, recv[n * bytes] == kPoison, "all-gather wrote past the end");
}

void checkReduceScatter(const Call& c, weftRedOp_t op) {
  const size_t n = static_cast<size_t>(c.n()), total = n * c.count;
  std::vector<char> send(total * typeSize(c.type) + 1, kPoison), recv = poisoned(c.bytes());
  for (size_t g = 0; g < total; ++g) storeValue(send.data(), g, c.type, inputValue(c.type, op, c.r(), c.n(), g));
  const size_t first = static_cast<size_t>(c.r()) * c.count;
  char* out = c.inPlace ? send.data() + first * typeSize(c.type) : recv.data();
  RANK_WEFT(c.ctx, weftReduceScatter(send.data(), out, c.count, c.type, op, c.comm, nullptr));
  size_t wrong = 0;
  for (size_t j = 0; j < c.count; ++j) wrong += !reducedMatches(out, j, first + j, c.type, op, c.n());
  CALL_CHECK(c, wrong == 0, "reduce-scatter op %d: %zu wrong", op, wrong);
  CALL_CHECK(c, c.inPlace ? send[total * typeSize(c.type)] == kPoison : recv[c.bytes()] == kPoison,
             "reduce-scatter wrote past the end");
}

// Block b of rank s's alltoall input: the pattern of (s, b).
int alltoallWho(int from, int to) { return from * 64 + to; }

void checkAlltoAll(const Call& c) {
  const size_t bytes = c.bytes(), n = static_cast<size_t>(c.n());
  std::vector<char> send(n * bytes + 1, kPoison), recv = poisoned(n * bytes);
  for (int b = 0; b < c.n(); ++b) fill(send.data() + static_cast<size_t>(b) * bytes, bytes, alltoallWho(c.r(), b));
  char* out = c.inPlace ? send.data() : recv.data();
  RANK_WEFT(c.ctx, weftAlltoAll(send.data(), out, c.count, c.type, c.comm, nullptr));
  for (int s = 0; s < c.n(); ++s) {
    const char* block = out + static_cast<size_t>(s) * bytes;
    CALL_CHECK(c, firstWrong(block, bytes, alltoallWho(s, c.r())) == bytes, "alltoall block from %d wrong", s);
  }
  CALL_CHECK(c, out[n * bytes] == kPoison, "alltoall wrote past the end");
}

void checkGather(const Call& c, int root) {
  const size_t bytes = c.bytes(), n = static_cast<size_t>(c.n());
  std::vector<char> send(bytes + 1), recv = poisoned(n * bytes);
  const bool isRoot = c.r() == root;
  const size_t mine = static_cast<size_t>(c.r()) * bytes;
  if (c.inPlace && isRoot) {
    fill(recv.data() + mine, bytes, c.r());
    RANK_WEFT(c.ctx, weftGather(recv.data() + mine, recv.data(), c.count, c.type, root, c.comm, nullptr));
  } else {
    fill(send.data(), bytes, c.r());
    // Only the root's recvbuff is written: elsewhere pass NULL.
    RANK_WEFT(c.ctx, weftGather(send.data(), isRoot ? recv.data() : nullptr, c.count, c.type, root, c.comm, nullptr));
  }
  if (!isRoot) return;
  for (int b = 0; b < c.n(); ++b) {
    const char* block = recv.data() + static_cast<size_t>(b) * bytes;
    CALL_CHECK(c, firstWrong(block, bytes, b) == bytes, "gather to %d: block %d wrong", root, b);
  }
  CALL_CHECK(c, recv[n * bytes] == kPoison, "gather wrote past the end");
}

void checkScatter(const Call& c, int root) {
  const size_t bytes = c.bytes(), n = static_cast<size_t>(c.n());
  const bool isRoot = c.r() == root;
  std::vector<char> send(n * bytes + 1, kPoison), recv = poisoned(bytes);
  if (isRoot) {
    for (int b = 0; b < c.n(); ++b) fill(send.data() + static_cast<size_t>(b) * bytes, bytes, b);
  }
  char* out = c.inPlace && isRoot ? send.data() + static_cast<size_t>(c.r()) * bytes : recv.data();
  RANK_WEFT(c.ctx, weftScatter(isRoot ? send.data() : nullptr, out, c.count, c.type, root, c.comm, nullptr));
  CALL_CHECK(c, firstWrong(out, bytes, c.r()) == bytes, "scatter from %d wrong at byte %zu", root,
             firstWrong(out, bytes, c.r()));
  if (out == recv.data()) CALL_CHECK(c, recv[bytes] == kPoison, "scatter wrote past the end");
}

// A group per rank: send to the next rank, receive from the previous, and to/from itself.
void checkSendRecv(const Call& c) {
  const size_t bytes = c.bytes();
  const int next = (c.r() + 1) % c.n(), prev = (c.r() + c.n() - 1) % c.n();
  std::vector<char> toNext(bytes), toSelf(bytes), fromPrev = poisoned(bytes), fromSelf = poisoned(bytes);
  fill(toNext.data(), bytes, c.r());
  fill(toSelf.data(), bytes, 100 + c.r());
  RANK_WEFT(c.ctx, weftGroupStart());
  // Receives first on odd ranks, sends first on even ones: order inside a group must not matter.
  if (c.r() % 2) RANK_WEFT(c.ctx, weftRecv(fromPrev.data(), c.count, c.type, prev, c.comm, nullptr));
  RANK_WEFT(c.ctx, weftSend(toNext.data(), c.count, c.type, next, c.comm, nullptr));
  RANK_WEFT(c.ctx, weftSend(toSelf.data(), c.count, c.type, c.r(), c.comm, nullptr));
  if (c.r() % 2 == 0) RANK_WEFT(c.ctx, weftRecv(fromPrev.data(), c.count, c.type, prev, c.comm, nullptr));
  RANK_WEFT(c.ctx, weftRecv(fromSelf.data(), c.count, c.type, c.r(), c.comm, nullptr));
  RANK_WEFT(c.ctx, weftGroupEnd());
  const int expectPrev = c.n() == 1 ? c.r() : prev;
  CALL_CHECK(c, firstWrong(fromPrev.data(), bytes, expectPrev) == bytes, "receive from %d wrong", prev);
  CALL_CHECK(c, firstWrong(fromSelf.data(), bytes, 100 + c.r()) == bytes, "receive from self wrong");
  CALL_CHECK(c, fromPrev[bytes] == kPoison && fromSelf[bytes] == kPoison, "a receive wrote past the end");
}

enum class Which { Broadcast, Reduce, AllGather, ReduceScatter, AlltoAll, Gather, Scatter, SendRecv };

// Runs one collective over every type (x op) x count x placement (x root) on every rank count.
void runSuite(Which which, const std::vector<size_t>& counts = kCounts, const std::vector<int>& rankCounts = kRankCounts) {
  for (int n : rankCounts) {
    DYNAMIC_SECTION(n << " ranks") {
      auto outcomes = runRanks(n, [&](RankContext& ctx) {
        weftComm_t comm = nullptr;
        RANK_WEFT(ctx, weftCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
        if (comm == nullptr) return 1;
        const int roots[] = {0, ctx.nranks - 1};
        for (int t = 0; t < weftNumTypes; ++t) {
          for (size_t count : counts) {
            for (bool inPlace : {false, true}) {
              Call c{ctx, comm, static_cast<weftDataType_t>(t), count, inPlace};
              switch (which) {
                case Which::Broadcast: for (int root : roots) checkBroadcast(c, root); break;
                case Which::Reduce:
                  for (int o = 0; o < weftNumOps; ++o) {
                    for (int root : roots) checkReduce(c, static_cast<weftRedOp_t>(o), root);
                  }
                  break;
                case Which::AllGather: checkAllGather(c); break;
                case Which::ReduceScatter:
                  for (int o = 0; o < weftNumOps; ++o) checkReduceScatter(c, static_cast<weftRedOp_t>(o));
                  break;
                case Which::AlltoAll: checkAlltoAll(c); break;
                case Which::Gather: for (int root : roots) checkGather(c, root); break;
                case Which::Scatter: for (int root : roots) checkScatter(c, root); break;
                case Which::SendRecv: if (!inPlace) checkSendRecv(c); break;
              }
              if (ctx.failures > 0) break;
            }
          }
        }
        RANK_WEFT(ctx, weftCommDestroy(comm));
        return 0;
      });
      INFO(describeFailures(outcomes));
      for (const auto& o : outcomes) CHECK(o.exitCode == 0);
    }
  }
}

// Forces WEFT_ALGO (and small pipeline chunks) for the length of one section.
struct ForcedAlgorithm {
  explicit ForcedAlgorithm(const char* algo) {
    setenv("WEFT_ALGO", algo, 1);
    setenv("WEFT_CHUNK_BYTES", "1K", 1);
  }
  ~ForcedAlgorithm() {
    unsetenv("WEFT_ALGO");
    unsetenv("WEFT_CHUNK_BYTES");
  }
};

}  // namespace

TEST_CASE("broadcast: every dtype, count, placement and root", "[collectives][multiprocess]") { runSuite(Which::Broadcast); }
TEST_CASE("reduce: every dtype x op, count, placement and root", "[collectives][multiprocess]") { runSuite(Which::Reduce); }
TEST_CASE("all-gather: every dtype, count and placement", "[collectives][multiprocess]") { runSuite(Which::AllGather); }
TEST_CASE("reduce-scatter: every dtype x op, count and placement", "[collectives][multiprocess]") {
  runSuite(Which::ReduceScatter);
}
TEST_CASE("alltoall: every dtype, count and placement", "[collectives][multiprocess]") { runSuite(Which::AlltoAll); }
TEST_CASE("gather: every dtype, count, placement and root", "[collectives][multiprocess]") { runSuite(Which::Gather); }
TEST_CASE("scatter: every dtype, count, placement and root", "[collectives][multiprocess]") { runSuite(Which::Scatter); }
TEST_CASE("send/recv: grouped ring exchange and self, every dtype and count", "[collectives][multiprocess]") {
  runSuite(Which::SendRecv);
}

TEST_CASE("rooted and blocked collectives through every algorithm, many pipeline chunks", "[collectives][multiprocess]") {
  // 1 KiB chunks: 1001 elements of 8 bytes is 8 chunks per block and more per buffer.
  for (const char* algo : {"ring", "tree", "oneshot"}) {
    for (Which which : {Which::Broadcast, Which::Reduce, Which::AllGather, Which::ReduceScatter}) {
      DYNAMIC_SECTION(algo << " collective " << static_cast<int>(which)) {
        ForcedAlgorithm forced(algo);
        runSuite(which, {1, 1001}, {3, 4, 5});
      }
    }
  }
}

TEST_CASE("all-reduce through the tree", "[collectives][multiprocess]") {
  ForcedAlgorithm forced("allreduce:tree");
  for (int n : {2, 3, 5, 8}) {
    DYNAMIC_SECTION(n << " ranks") {
      auto outcomes = runRanks(n, [](RankContext& ctx) {
        weftComm_t comm = nullptr;
        RANK_WEFT(ctx, weftCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
        if (comm == nullptr) return 1;
        for (int t = 0; t < weftNumTypes; ++t) {
          auto type = static_cast<weftDataType_t>(t);
          for (int o = 0; o < weftNumOps; ++o) {
            auto op = static_cast<weftRedOp_t>(o);
            for (size_t count : {size_t{1}, size_t{1001}}) {
              for (bool inPlace : {false, true}) {
                std::vector<char> send(count * typeSize(type) + 1, kPoison), recv = poisoned(count * typeSize(type));
                for (size_t i = 0; i < count; ++i) storeValue(send.data(), i, type, inputValue(type, op, ctx.rank, ctx.nranks, i));
                char* out = inPlace ? send.data() : recv.data();
                RANK_WEFT(ctx, weftAllReduce(send.data(), out, count, type, op, comm, nullptr));
                size_t wrong = 0;
                for (size_t i = 0; i < count; ++i) wrong += !resultMatches(out, i, type, op, ctx.nranks);
                RANK_CHECK(ctx, wrong == 0 && out[count * typeSize(type)] == kPoison,
                           "tree all-reduce type %d op %d count %zu: %zu wrong", t, o, count, wrong);
              }
            }
          }
        }
        RANK_WEFT(ctx, weftCommDestroy(comm));
        return 0;
      });
      INFO(describeFailures(outcomes));
      for (const auto& o : outcomes) CHECK(o.exitCode == 0);
    }
  }
}

TEST_CASE("ring reduce-scatter: many more chunks per block than scratch slots", "[collectives][multiprocess]") {
  // Each partial waits in a scratch slot for its next step; taken step by step, the slots
  // wrapped around and a later chunk overwrote a partial not yet sent on (wrong sums beyond 8
  // chunks per block on 3 or more ranks).
  for (int n : {3, 5}) {
    DYNAMIC_SECTION(n << " ranks") {
      ForcedAlgorithm ring("ring");  // 1 KiB chunks: 40 per block
      auto outcomes = runRanks(n, [](RankContext& ctx) {
        weftComm_t comm = nullptr;
        RANK_WEFT(ctx, weftCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
        if (comm == nullptr) return 1;
        for (bool inPlace : {false, true}) checkReduceScatter(Call{ctx, comm, weftFloat32, 10000, inPlace}, weftSum);
        RANK_WEFT(ctx, weftCommDestroy(comm));
        return 0;
      });
      INFO(describeFailures(outcomes));
      for (const auto& o : outcomes) CHECK(o.exitCode == 0);
    }
  }
}

TEST_CASE("large messages: every collective with megabytes per rank", "[collectives][multiprocess]") {
  // Large enough for several default (128 or 512 KiB) pipeline chunks and for socket striping.
  for (Which which : {Which::Broadcast, Which::Reduce, Which::AllGather, Which::ReduceScatter, Which::AlltoAll,
                      Which::Gather, Which::Scatter, Which::SendRecv}) {
    DYNAMIC_SECTION("collective " << static_cast<int>(which)) {
      auto outcomes = runRanks(3, [which](RankContext& ctx) {
        weftComm_t comm = nullptr;
        RANK_WEFT(ctx, weftCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
        if (comm == nullptr) return 1;
        for (bool inPlace : {false, true}) {
          Call c{ctx, comm, weftFloat32, (size_t{3} << 18) + 17, inPlace};
          switch (which) {
            case Which::Broadcast: checkBroadcast(c, 1); break;
            case Which::Reduce: checkReduce(c, weftSum, 2); break;
            case Which::AllGather: checkAllGather(c); break;
            case Which::ReduceScatter: checkReduceScatter(c, weftSum); break;
            case Which::AlltoAll: checkAlltoAll(c); break;
            case Which::Gather: checkGather(c, 0); break;
            case Which::Scatter: checkScatter(c, 2); break;
            case Which::SendRecv: if (!inPlace) checkSendRecv(c); break;
          }
        }
        RANK_WEFT(ctx, weftCommDestroy(comm));
        return 0;
      });
      INFO(describeFailures(outcomes));
      for (const auto& o : outcomes) CHECK(o.exitCode == 0);
    }
  }
}
