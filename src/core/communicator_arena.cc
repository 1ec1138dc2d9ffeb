// The communicator's shared-memory arena (transport/shm/shm_arena.h): which calls it serves,
// setting it up with every rank of the host, and running a call on it.
#include "core/communicator.h"

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "coll/arena_allgather.h"
#include "coll/arena_allreduce.h"
#include "coll/arena_broadcast.h"
#include "coll/direct_allreduce.h"
#include "util/log.h"

namespace weft::core {

bool Communicator::suitsArena(const CollectiveCall& call) {
  // Decided alike on every rank: from the call and from what every rank knows.
  // Whether the arena could serve it is asked first: it is cheaper than the tuner's choice.
  const size_t bytes = callBytes(call);
  constexpr auto kOneShot = coll::Algorithm::OneShot;
  return bytes > 0 && coll::runsOnArena(layout_, call.collective, kOneShot, bytes) &&
         algorithmFor(call.collective, bytes, kernels::dataTypeSize(call.type)) == kOneShot;
}

Status Communicator::setUpArena(const Deadline& deadline) {
  // Each rank creates its segment; the names go round (an all-gather on the executor); each
  // rank maps every other's, and a MIN all-reduce tells whether all did. Then every name goes,
  // so nothing is left in /dev/shm whatever happens to the processes later.
  struct Record {
    uint8_t ok;
    char name[63];
  };
  Record mine{};
  WEFT_TRY(connectAll("all-reduce", deadline));
  std::optional<transport::ShmArena> created;
  std::string why;
  if (!shmEverywhere_) {
    why = "not every connection of " + mesh_.describe(rank()) + " is shared memory";
  } else {
    auto made = transport::ShmArena::create(formatString("%08x-arena-%d", mesh_.secretDigest(), rank()), rank(),
                                            size(), coll::kArenaSlotBytes);
    static_assert(sizeof(mine.name) > transport::ShmSegment::kMaxNameLength);
    if (!made.isOk()) {
      why = made.status().message();
    } else {
      created = made.take();
      mine.ok = 1;
      std::memcpy(mine.name, created->ownName().c_str(), created->ownName().size() + 1);
    }
  }
  std::vector<Record> all(static_cast<size_t>(size()));
  auto nameOf = [&all](int peer) {
    const Record& r = all[static_cast<size_t>(peer)];
    return std::string(r.name, strnlen(r.name, sizeof(r.name)));
  };
  const CollectiveCall gather{coll::Collective::AllGather, &mine, all.data(), sizeof(Record), weftUint8};
  WEFT_TRY(runScheduled({&gather, 1}, deadline));
  uint8_t attached = mine.ok;
  for (int peer = 0; peer < size() && attached; ++peer) {
    const Record& r = all[static_cast<size_t>(peer)];
    if (!r.ok) {
      attached = 0;
      why = mesh_.describe(peer) + " could not create its segment";
    } else if (peer != rank()) {
      Status s = created->attach(peer, nameOf(peer));
      if (!s.isOk()) {
        attached = 0;
        why = s.message();
      }
    }
  }
  const CollectiveCall agree{coll::Collective::AllReduce, &attached, &attached, 1, weftUint8, weftMin};
  if (Status agreed = runScheduled({&agree, 1}, deadline); !agreed.isOk()) {
    // A peer failed, or died, after the gather: it may never remove its segment's name, so
    // every rank removes every name it was given (the communicator is failed either way).
    for (int peer = 0; peer < size(); ++peer) {
      if (all[static_cast<size_t>(peer)].ok && peer != rank()) transport::ShmSegment::removeName(nameOf(peer));
    }
    return agreed;
  }
  if (created) created->unlinkOwn();
  if (attached) {
    arena_ = std::move(created);
    WEFT_INFO("small all-reduces (up to %zu bytes), one-shot all-gathers and broadcasts go through a shared-memory arena",
              coll::kArenaMaxBytes);
  } else {
    why = why.empty() ? "a peer could not map the arena" : why;
    if (shmEverywhere_) {  // it should have been there: say so where it is seen
      WEFT_WARN("no shared-memory arena (%s): small all-reduces, all-gathers and broadcasts take the slower path "
                "through the connections (give /dev/shm more room, e.g. docker run --shm-size=1g)",
                why.c_str());
    } else {
      WEFT_INFO("all-reduces, all-gathers and broadcasts stay on the executor: %s", why.c_str());
    }
    {
      std::lock_guard lock(modelMutex_);
      layout_.arenaBytes = 0;  // every rank gets here: the tuner chooses again, alike everywhere
    }
    forgetChoices();
  }
  return Status::ok();
}

Status Communicator::runOnArena(const CollectiveCall& call) {
  const char* name = coll::collectiveName(call.collective);
  coll::ExecutionContext context{size(), name, Deadline::never(), config_.timeoutMs, abortFlag_, &mesh_, spin_.arena};
  if (call.collective == coll::Collective::AllGather) {
    const coll::ArenaAllGather a{call.send, call.recv, callBytes(call), messageTag(call)};
    return coll::arenaAllGather(*arena_, &arenaSeq_, a, context);
  }
  if (call.collective == coll::Collective::Broadcast) {
    const coll::ArenaBroadcast a{call.send, call.recv, callBytes(call), call.root, messageTag(call)};
    return coll::arenaBroadcast(*arena_, &arenaSeq_, a, context);
  }
  coll::ArenaAllReduce a{call.send, call.recv, call.count, call.type, call.op, nullptr, messageTag(call)};
  if (call.preMulSum) a.scale = call.scalarAt ? call.scalarAt : call.scalarValue.data();
  if (dividesInputs(call)) {
    a.op = weftSum;
    a.divideInputs = true;
  }
  return coll::arenaAllReduce(*arena_, ++arenaSeq_, a, context);
}

bool Communicator::suitsDirect(const CollectiveCall& call) const {
  // From the call and from what every rank knows (the tuning settings are the same everywhere).
  constexpr auto kAllReduce = static_cast<size_t>(coll::Collective::AllReduce);
  return call.collective == coll::Collective::AllReduce && callBytes(call) >= coll::kDirectMinBytes &&
         layout_.arenaBytes > 0 && !call.preMulSum && !dividesInputs(call) && !tuning_.forced[kAllReduce];
}

Result<bool> Communicator::runDirect(const CollectiveCall& call) {
  coll::ExecutionContext context{size(), "all-reduce", Deadline::never(), config_.timeoutMs, abortFlag_, &mesh_,
                                 spin_.arena};
  const bool streaming = callBytes(call) >= directStreamingMinBytes_;
  const coll::DirectAllReduce direct{call.send, call.recv, call.count, call.type, call.op, messageTag(call), streaming};
  std::string whyNot;
  WEFT_ASSIGN_OR_RETURN(const bool done,
                        coll::directAllReduce(*arena_, &arenaSeq_, peerAllocations_, direct, context, &whyNot));
  if (!directReported_) {
    directReported_ = true;
    if (done) {
      WEFT_INFO("all-reduces of %zu bytes or more on weftHostMemAlloc buffers read the peers' buffers directly "
                "(out of place from %zu bytes with streaming stores)",
                coll::kDirectMinBytes, directStreamingMinBytes_);
    } else {
      WEFT_INFO("an all-reduce of %zu bytes took the copying path: %s", callBytes(call), whyNot.c_str());
    }
  }
  return done;
}

}  // namespace weft::core
