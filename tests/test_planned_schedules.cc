// The schedules every algorithm builds over the planner's rings and trees, for layouts whose
// hosts are numbered across the ranks (rank r on host r mod H), so that plan order is not rank
// order: between every pair of ranks, the n-th send from a to b meets the n-th receive at b
// from a, with the same size. The transports match messages exactly so; a schedule that broke
// it would hang or corrupt data.
#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "coll/schedule_cache.h"
#include "coll/tuner.h"
#include "placements.h"
#include "plan/planner.h"

using namespace weft;
using test::interleaved;

namespace {

// Per (from, to): the sizes of the messages in posting order, as the senders see them and as
// the receivers do.
struct Traffic {
  std::map<std::pair<int, int>, std::vector<size_t>> sent, received;
};

void record(const coll::Schedule& schedule, int rank, Traffic* traffic) {
  for (size_t p = 0; p < schedule.peers.size(); ++p) {
    const int peer = schedule.peers[p];
    for (uint32_t id : schedule.sendOrder[p]) traffic->sent[{rank, peer}].push_back(schedule.steps[id].bytes);
    for (uint32_t id : schedule.recvOrder[p]) {
      traffic->received[{peer, rank}].push_back(schedule.steps[id].bytes);
    }
  }
}

}  // namespace

TEST_CASE("planned schedules: every send meets its receive on every layout, collective and algorithm",
          "[planner][schedules]") {
  using coll::Algorithm;
  using coll::Collective;
  const coll::PipelineParams pipeline{.chunkBytes = 64, .slots = 2};  // many chunks per block
  const coll::PipelineParams large{.chunkBytes = 16 * 1024, .slots = 2};
  for (auto [hosts, perHost, nics] : {std::tuple{3, 2, 0}, {2, 3, 0}, {5, 2, 0}, {4, 1, 0}, {1, 5, 0}, {3, 3, 0},
                                      {3, 2, 2}, {2, 3, 2}, {2, 4, 4}}) {
    const auto placements = interleaved(hosts, perHost, 8, nics);
    const plan::Plan plan = plan::makePlan(placements);
    const coll::RankOrder order = plan::rankOrderOf(plan);
    REQUIRE(order.channelRings.size() == (nics > 1 ? static_cast<size_t>(nics) : 0));
    const int n = hosts * perHost;
    for (int c = 0; c <= static_cast<int>(Collective::Scatter); ++c) {
      const auto collective = static_cast<Collective>(c);
      for (Algorithm algorithm : {Algorithm::Ring, Algorithm::Tree, Algorithm::RecursiveDoubling, Algorithm::OneShot,
                                  Algorithm::Direct}) {
        if (!coll::hasAlgorithm(collective, algorithm)) continue;
        // Large enough that the ring all-reduce splits over the channels (in chunks of 16 KiB).
        std::vector<size_t> counts{1, 7, 1000};
        if (nics > 1 && collective == Collective::AllReduce && algorithm == Algorithm::Ring) counts.push_back(300000);
        for (size_t count : counts) {
          for (int root : {0, n - 1}) {
            for (int transport : {0, 1, 2}) {  // plain; reducing on receipt; and forwarding as well
              const bool recvReduce = transport > 0, forward = transport > 1;
              CAPTURE(hosts, perHost, nics, coll::collectiveName(collective), coll::algorithmName(algorithm), count,
                      root, recvReduce, forward);
              Traffic traffic;
              for (int rank = 0; rank < n; ++rank) {
                coll::CollectiveShape shape{.collective = collective, .nranks = n, .rank = rank, .count = count,
                                            .elementSize = 4, .root = root, .recvReduce = recvReduce,
                                            .forward = forward, .order = &order};
                record(coll::buildSchedule(shape, algorithm, count > 1000 ? large : pipeline), rank, &traffic);
              }
              REQUIRE(traffic.sent == traffic.received);
              // Nothing but the root's own copy stays local: every rank that holds data sends.
              if (n > 1) REQUIRE(!traffic.sent.empty());
            }
          }
        }
      }
    }
  }
}

TEST_CASE("planned schedules: with two channels the ring all-reduce runs both rings, each over its share",
          "[planner][schedules]") {
  const auto placements = interleaved(2, 2, 8, 2);
  const plan::Plan plan = plan::makePlan(placements);
  const coll::RankOrder order = plan::rankOrderOf(plan);
  REQUIRE(order.channelRings.size() == 2);
  // Hosts with a dozen NIC functions (ports, management, DPU) still get one channel per rail.
  CHECK(plan::makePlan(interleaved(2, 2, 8, 12)).channels.size() == static_cast<size_t>(plan::kMaxChannels));
  REQUIRE(order.channelRings[0] != order.channelRings[1]);  // each host left by its other rank
  const int n = 4;
  const size_t count = 2 * 4 * 32 * 1024 / 4;  // each channel's blocks 32 KiB, the least that splits
  const coll::PipelineParams pipeline{.chunkBytes = 8 * 1024, .slots = 2};
  for (int rank = 0; rank < n; ++rank) {
    coll::CollectiveShape shape{.nranks = n, .rank = rank, .count = count, .elementSize = 4, .order = &order};
    const coll::Schedule s = coll::buildSchedule(shape, coll::Algorithm::Ring, pipeline);
    // Channel c's neighbours send and receive the c-th half of the buffer, and only that.
    std::vector<int> nexts;
    for (size_t c = 0; c < 2; ++c) {
      coll::RankOrder ring;
      ring.ring = order.channelRings[c];
      const int position = ring.ringPosition(rank, n);
      const int next = ring.ringRank(position + 1, n), prev = ring.ringRank(position - 1, n);
      nexts.push_back(next);
      const size_t begin = c * count / 2 * 4, end = (c + 1) * count / 2 * 4;
      size_t sent = 0, received = 0;
      for (const coll::Step& step : s.steps) {
        const bool send = step.kind == coll::StepKind::Send;
        const coll::Region at = send ? step.src : step.dst;
        if (!send && step.kind != coll::StepKind::Recv) continue;
        if (at.buffer == coll::Buffer::Scratch || at.offset < begin || at.offset >= end) continue;
        CAPTURE(rank, c, at.offset);
        REQUIRE(step.peer == (send ? next : prev));
        REQUIRE(at.offset + step.bytes <= end);
        (send ? sent : received) += step.bytes;
      }
      // Of the 2(n-1) blocks sent, the first and the all-gather's n-1 go out of the buffers (the
      // partial sums between, out of scratch slots: below); the reduce-scatter's receives land
      // in scratch slots.
      CHECK(sent == end - begin);
      CHECK(received == (end - begin) * (n - 1) / n);
    }
    size_t sentFromScratch = 0;
    for (const coll::Step& step : s.steps) {
      if (step.kind != coll::StepKind::Send || step.src.buffer != coll::Buffer::Scratch) continue;
      CHECK((step.peer == nexts[0] || step.peer == nexts[1]));
      sentFromScratch += step.bytes;
    }
    CHECK(sentFromScratch == count * 4 * (n - 2) / n);
    // Streaming the output is decided for the whole call, not for each channel's share.
    coll::PipelineParams streaming = pipeline;
    streaming.streamingMinBytes = count * 4;
    size_t streamed[2] = {0, 0};  // by half of the output
    for (const coll::Step& step : coll::buildSchedule(shape, coll::Algorithm::Ring, streaming).steps) {
      if (step.streaming) streamed[step.dst.offset >= count * 2] += step.bytes;
    }
    CHECK(streamed[0] > 0);
    CHECK(streamed[1] > 0);
  }
}

TEST_CASE("planned schedules: the ring algorithms talk only to ring neighbours, the tree all-reduce only to tree ones",
          "[planner][schedules]") {
  const auto placements = interleaved(3, 2, 8);
  const plan::Plan plan = plan::makePlan(placements);
  const coll::RankOrder order = plan::rankOrderOf(plan);
  const int n = 6;
  const coll::PipelineParams pipeline{.chunkBytes = 64, .slots = 2};
  REQUIRE(order.ring != std::vector<int>{0, 1, 2, 3, 4, 5});  // not rank order
  for (int rank = 0; rank < n; ++rank) {
    const int position = order.ringPosition(rank, n);
    const int next = order.ringRank(position + 1, n), prev = order.ringRank(position - 1, n);
    for (auto collective : {coll::Collective::AllReduce, coll::Collective::AllGather, coll::Collective::ReduceScatter}) {
      coll::CollectiveShape shape{.collective = collective, .nranks = n, .rank = rank, .count = 1000,
                                  .elementSize = 4, .order = &order};
      const coll::Schedule s = coll::buildSchedule(shape, coll::Algorithm::Ring, pipeline);
      for (const coll::Step& step : s.steps) {
        if (step.kind == coll::StepKind::Send) REQUIRE(step.peer == next);
        if (step.kind == coll::StepKind::Recv || step.kind == coll::StepKind::RecvReduce) REQUIRE(step.peer == prev);
      }
    }
    coll::CollectiveShape shape{.nranks = n, .rank = rank, .count = 1000, .elementSize = 4, .order = &order};
    const coll::Schedule tree = coll::buildSchedule(shape, coll::Algorithm::Tree, pipeline);
    for (const coll::Step& step : tree.steps) {
      if (step.peer < 0) continue;
      bool neighbour = false;
      for (const plan::Tree& t : plan.trees) {
        neighbour = neighbour || t.parent[static_cast<size_t>(rank)] == step.peer ||
                    t.parent[static_cast<size_t>(step.peer)] == rank;
      }
      CAPTURE(rank, step.peer);
      REQUIRE(neighbour);
    }
  }
}

TEST_CASE("ring all-reduce: each chunk is sent on right after it arrives, not after its whole block", "[schedules]") {
  // With 32 chunks per block, step-by-step order would put 31 sends between a chunk's arrival
  // and its sending on; issued by diagonals, at most one diagonal's worth (2(n-1)) come between.
  const coll::PipelineParams pipeline{.chunkBytes = 64, .slots = 2};  // 16 floats per chunk
  for (int n : {2, 3, 4}) {
    const coll::RankOrder order = plan::rankOrderOf(plan::makePlan(interleaved(1, n, 8)));
    for (bool recvReduce : {false, true}) {
      for (int rank = 0; rank < n; ++rank) {
        CAPTURE(n, recvReduce, rank);
        const coll::CollectiveShape shape{.nranks = n, .rank = rank, .count = static_cast<size_t>(n) * 32 * 16,
                                          .elementSize = 4, .recvReduce = recvReduce, .order = &order};
        const coll::Schedule s = coll::buildSchedule(shape, coll::Algorithm::Ring, pipeline);
        // region written (receive buffer or scratch) -> sends issued before
        std::map<std::pair<coll::BufferId, size_t>, size_t> sendsWhenWritten;
        size_t sends = 0, forwarded = 0;
        for (const coll::Step& step : s.steps) {
          if (step.kind == coll::StepKind::Send) {
            if (step.src.buffer != coll::Buffer::Send) {
              const std::pair region{step.src.buffer, step.src.offset};
              REQUIRE(sendsWhenWritten.count(region) == 1);
              CHECK(sends - sendsWhenWritten[region] <= static_cast<size_t>(2 * (n - 1)));
              ++forwarded;
            }
            ++sends;
          } else {
            sendsWhenWritten[{step.dst.buffer, step.dst.offset}] = sends;
          }
        }
        CHECK(forwarded == static_cast<size_t>(2 * n - 3) * 32);  // every step's but the first
      }
    }
  }
}

TEST_CASE("ring all-reduce: over forwarding connections each receive passes its chunk on in the same step",
          "[schedules]") {
  const coll::PipelineParams pipeline{.chunkBytes = 64, .slots = 2};  // 16 floats per chunk
  const size_t chunksPerBlock = 32;
  for (int n : {2, 3, 4}) {
    const coll::RankOrder order = plan::rankOrderOf(plan::makePlan(interleaved(1, n, 8)));
    for (bool average : {false, true}) {
      for (bool inPlace : {false, true}) {
        for (int rank = 0; rank < n; ++rank) {
          CAPTURE(n, average, inPlace, rank);
          const coll::CollectiveShape shape{.nranks = n, .rank = rank, .count = static_cast<size_t>(n) * 32 * 16,
                                            .elementSize = 4, .inPlace = inPlace, .average = average,
                                            .recvReduce = true, .forward = true, .order = &order};
          const coll::Schedule s = coll::buildSchedule(shape, coll::Algorithm::Ring, pipeline);
          const int next = order.ringRank(order.ringPosition(rank, n) + 1, n);
          const int prev = order.ringRank(order.ringPosition(rank, n) - 1, n);
          // Every forwarding step is received from prev and sent to next, once in each order.
          std::map<uint32_t, int> inRecvOrder, inSendOrder;
          for (size_t p = 0; p < s.peers.size(); ++p) {
            for (uint32_t id : s.recvOrder[p]) inRecvOrder[id] += s.peers[p] == prev ? 1 : 100;
            for (uint32_t id : s.sendOrder[p]) inSendOrder[id] += s.peers[p] == next ? 1 : 100;
          }
          size_t sends = 0, forwards = 0, unfusedSends = 0;
          for (uint32_t id = 0; id < s.steps.size(); ++id) {
            const coll::Step& step = s.steps[id];
            if (step.forwardPeer >= 0) {
              ++forwards;
              CHECK(step.forwardPeer == next);
              CHECK(inRecvOrder[id] == 1);
              CHECK(inSendOrder[id] == 1);
              // Only a full sum or an all-gathered chunk must land; a partial only goes on.
              if (step.kind == coll::StepKind::RecvReduce && step.keepDestination) {
                CHECK(step.dst.buffer == coll::Buffer::Recv);
              }
            } else if (step.kind == coll::StepKind::Send) {
              ++sends;
              if (step.src.buffer != coll::Buffer::Send) ++unfusedSends;
            }
          }
          CHECK(s.forwards == forwards);
          CHECK(sends + forwards == static_cast<size_t>(2 * n - 2) * chunksPerBlock);  // as many messages as ever
          // Every step's chunk goes on fused but an average's full sum, which is divided first.
          const size_t unfused = average ? chunksPerBlock : 0;
          CHECK(unfusedSends == unfused);
          CHECK(forwards == static_cast<size_t>(2 * n - 3) * chunksPerBlock - unfused);
        }
      }
    }
  }
}

TEST_CASE("ring all-reduce: out of place only full sums reach the output, streamed there when the call is large",
          "[schedules]") {
  const size_t count = 3 * 40 * 16 + 5;  // many 64-byte chunks per block, blocks of unequal size
  for (int n : {2, 3, 4}) {
    const coll::RankOrder order = plan::rankOrderOf(plan::makePlan(interleaved(1, n, 8)));
    for (int transport : {0, 1, 2}) {  // plain; reducing on receipt; and forwarding as well
      const bool recvReduce = transport > 0, forward = transport > 1;
      for (bool inPlace : {false, true}) {
        for (size_t streamingMinBytes : {count * 4, count * 4 + 1}) {
          const bool streams = !inPlace && streamingMinBytes <= count * 4;
          const coll::PipelineParams pipeline{.chunkBytes = 64, .slots = 2, .streamingMinBytes = streamingMinBytes};
          for (int rank = 0; rank < n; ++rank) {
            CAPTURE(n, transport, inPlace, streamingMinBytes, rank);
            const coll::CollectiveShape shape{.nranks = n, .rank = rank, .count = count, .elementSize = 4,
                                              .inPlace = inPlace, .recvReduce = recvReduce, .forward = forward,
                                              .order = &order};
            const coll::Schedule s = coll::buildSchedule(shape, coll::Algorithm::Ring, pipeline);
            std::set<size_t> sentOn;  // output offsets that a send reads
            for (const coll::Step& step : s.steps) {
              if (step.kind == coll::StepKind::Send && step.src.buffer == coll::Buffer::Recv) sentOn.insert(step.src.offset);
            }
            // Out of place, partial sums stay in scratch: the output is written once. Streaming
            // stores write it exactly where no send reads it again (a plain send of the
            // all-gather's chunks reads it from cache; a forwarding receive sends from the slot).
            size_t outputBytes = 0;
            for (const coll::Step& step : s.steps) {
              if (step.kind == coll::StepKind::Send || step.dst.buffer != coll::Buffer::Recv) {
                CHECK(!step.streaming);
                continue;
              }
              CAPTURE(step.dst.offset);
              CHECK(step.streaming == (streams && sentOn.count(step.dst.offset) == 0));
              outputBytes += step.kind == coll::StepKind::Recv || step.kind == coll::StepKind::Copy ? step.bytes
                                                                                                     : step.elements * 4;
            }
            if (!inPlace) CHECK(outputBytes == count * 4);
          }
        }
      }
    }
  }
}

TEST_CASE("schedule cache: one shape with another pipeline gets its own schedule", "[schedules]") {
  const coll::RankOrder order = plan::rankOrderOf(plan::makePlan(interleaved(1, 4, 8)));
  const coll::CollectiveShape shape{.nranks = 4, .rank = 1, .count = 1 << 18, .elementSize = 4, .order = &order};
  coll::ScheduleCache cache;
  const auto coarse = cache.get(shape, coll::Algorithm::Ring, {.chunkBytes = 256 * 1024, .slots = 4});
  const auto fine = cache.get(shape, coll::Algorithm::Ring, {.chunkBytes = 16 * 1024, .slots = 4});
  CHECK(fine->steps.size() > coarse->steps.size());
  CHECK(cache.get(shape, coll::Algorithm::Ring, {.chunkBytes = 256 * 1024, .slots = 4}) == coarse);
  // A small ring all-reduce reserves slots of its blocks' size, not of the pipeline's chunk: 4
  // to receive into and at most 2 x 4 for partial sums, of a 64-byte line each.
  const coll::CollectiveShape small{.nranks = 4, .rank = 1, .count = 16, .elementSize = 4, .order = &order};
  CHECK(cache.get(small, coll::Algorithm::Ring, {.chunkBytes = 512 * 1024, .slots = 4})->scratchBytes <= 12 * 64);
}
