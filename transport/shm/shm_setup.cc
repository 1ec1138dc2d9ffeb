#include "transport/shm/shm_setup.h"

#include <sys/random.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstring>
#include <new>

#include "transport/shm/shm_connection.h"
#include "transport/shm/shm_segment.h"
#include "util/env.h"
#include "util/log.h"

namespace weft::transport {
namespace {

constexpr uint32_t kOfferMagic = 0x4f4d4853;  // "SHMO"
constexpr uint32_t kAckMagic = 0x414d4853;    // "SHMA"
constexpr uint16_t kSetupVersion = 1;

enum OfferStatus : uint16_t { kReady = 0, kDeclined = 1, kFailed = 2 };

struct ShmOffer {
  uint32_t magic;
  uint16_t version;
  uint16_t status;
  uint32_t pid;
  uint32_t slots;
  uint32_t slotBytes;
  uint32_t reserved;
  uint64_t probeAddress;  // where the probe value lives in the sender's address space
  uint64_t probeValue;
  uint64_t neededBytes;
  char name[64];
};

struct ShmAck {
  uint32_t magic;
  uint16_t mapped;        // 1: the peer's ring is mapped and sane
  uint16_t remoteReadOk;  // 1: process_vm_readv of the peer's probe worked
};

// A value only this process holds, for the peer's process_vm_readv probe.
const uint64_t& probeValue() {
  static const uint64_t value = [] {
    uint64_t v = 0;
    if (::getrandom(&v, sizeof(v), 0) != static_cast<ssize_t>(sizeof(v))) v = 0x5eed5eed5eedull ^ ::getpid();
    return v;
  }();
  return value;
}

bool offerIsSane(const ShmOffer& o) {
  return o.magic == kOfferMagic && o.version == kSetupVersion && o.status <= kFailed && o.slots >= 2 &&
         o.slots <= 4096 && o.slotBytes >= 64 && o.slotBytes <= (64u << 20) && o.slotBytes % 64 == 0 &&
         std::memchr(o.name, '\0', sizeof(o.name)) != nullptr;
}

Result<shm::RingView> mapPeerRing(const ShmOffer& offer, ShmSegment* segment) {
  WEFT_ASSIGN_OR_RETURN(*segment, ShmSegment::open(offer.name, shm::ringBytes(offer.slots, offer.slotBytes)));
  auto* control = static_cast<shm::RingControl*>(segment->data());
  if (control->magic != shm::kRingMagic || control->version != shm::kRingVersion || control->slots != offer.slots ||
      control->slotBytes != offer.slotBytes) {
    return Status(weftRemoteError, "the peer's shared-memory ring does not match its offer");
  }
  return shm::RingView{control, static_cast<char*>(segment->data()) + sizeof(shm::RingControl), offer.slots,
                       offer.slotBytes};
}

}  // namespace

Result<ShmOptions> shmOptionsFromEnv() {
  ShmOptions options;
  if (auto transport = envString("WEFT_TRANSPORT")) {
    if (*transport == "shm") options.policy = ShmPolicy::Required;
    else if (*transport == "socket") options.policy = ShmPolicy::Never;
    else return Status(weftInvalidArgument, "WEFT_TRANSPORT=\"" + *transport + "\": expected socket or shm");
  }
  WEFT_ASSIGN_OR_RETURN(auto disable, envInt("WEFT_SHM_DISABLE", 0, 1));
  if (disable && *disable == 1) {
    if (options.policy == ShmPolicy::Required) {
      return Status(weftInvalidArgument, "WEFT_TRANSPORT=shm and WEFT_SHM_DISABLE=1 contradict each other");
    }
    options.policy = ShmPolicy::Never;
  }
  WEFT_ASSIGN_OR_RETURN(auto slots, envInt("WEFT_SHM_SLOTS", 2, 4096));
  if (slots) options.slots = static_cast<uint32_t>(*slots);
  if (auto text = envString("WEFT_SHM_SLOT_BYTES")) {
    auto bytes = parseByteSize(*text);
    if (!bytes || *bytes < 64 || *bytes > (64u << 20) || *bytes % 64 != 0) {
      return Status(weftInvalidArgument,
                    "WEFT_SHM_SLOT_BYTES=\"" + *text + "\": expected a multiple of 64 from 64 to 64M bytes");
    }
    options.slotBytes = static_cast<uint32_t>(*bytes);
  }
  if (auto text = envString("WEFT_SHM_REMOTE_READ_MIN_BYTES")) {
    auto bytes = parseByteSize(*text);
    if (*text == "never") options.remoteReadMinBytes = SIZE_MAX;
    else if (bytes) options.remoteReadMinBytes = *bytes;
    else return Status(weftInvalidArgument, "WEFT_SHM_REMOTE_READ_MIN_BYTES=\"" + *text + "\": expected a size or never");
  }
  WEFT_ASSIGN_OR_RETURN(auto forward, envInt("WEFT_SHM_FORWARD", 0, 1));
  if (forward) options.forward = *forward == 1;
  WEFT_ASSIGN_OR_RETURN(options.slotStores, shm::slotStoresPolicyFromEnv());
  return options;
}

bool canReadRemote(pid_t pid, uint64_t address, uint64_t expected) {
  uint64_t got = 0;
  iovec local{&got, sizeof(got)};
  iovec remote{reinterpret_cast<void*>(address), sizeof(got)};
  return ::process_vm_readv(pid, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(sizeof(got)) && got == expected;
}

Result<std::unique_ptr<Connection>> establishShm(const ShmPeer& peer, std::vector<UniqueFd>& streams,
                                                 const std::string& tag, const ShmOptions& options,
                                                 const Deadline& deadline, const std::atomic<bool>* abortFlag) {
  const int fd = streams.at(0).get();
  const size_t bytes = shm::ringBytes(options.slots, options.slotBytes);

  ShmOffer mine{};
  mine.magic = kOfferMagic;
  mine.version = kSetupVersion;
  mine.pid = static_cast<uint32_t>(::getpid());
  mine.slots = options.slots;
  mine.slotBytes = options.slotBytes;
  mine.probeAddress = reinterpret_cast<uint64_t>(&probeValue());
  mine.probeValue = probeValue();
  mine.neededBytes = bytes;
  ShmSegment outbound;
  Status createFailure;
  if (options.policy == ShmPolicy::Never) {
    mine.status = kDeclined;
  } else {
    static_assert(sizeof(mine.name) > ShmSegment::kMaxNameLength);
    auto made = ShmSegment::create(tag, bytes);
    if (made.isOk()) {
      outbound = made.take();
      new (outbound.data()) shm::RingControl{shm::kRingMagic, shm::kRingVersion, options.slots, options.slotBytes,
                                             {0}, {0}, {0}, {0}, {0}, {0}, {0}};
      std::snprintf(mine.name, sizeof(mine.name), "%s", outbound.name().c_str());
    } else {
      mine.status = kFailed;
      createFailure = made.status();
    }
  }

  ShmOffer theirs{};
  WEFT_TRY(sendAll(fd, &mine, sizeof(mine), deadline, abortFlag).withContext("shared-memory setup"));
  WEFT_TRY(recvAll(fd, &theirs, sizeof(theirs), deadline, abortFlag).withContext("shared-memory setup"));
  if (!offerIsSane(theirs)) {
    return Status(weftRemoteError, formatString("rank %d sent a malformed shared-memory offer", peer.rank));
  }

  const std::string chooseSockets = "set WEFT_SHM_DISABLE=1 or WEFT_TRANSPORT=socket to choose sockets without this warning";
  const std::string fallback = "(" + chooseSockets + ", or give /dev/shm more room, e.g. docker run --shm-size=1g)";
  if (mine.status != kReady || theirs.status != kReady) {
    std::string why = mine.status == kFailed ? createFailure.message()
                      : mine.status == kDeclined
                          ? "this rank has shared memory disabled"
                          : formatString("rank %d could not %s", peer.rank,
                                         theirs.status == kDeclined ? "use shared memory (disabled there)"
                                                                    : "create its shared-memory ring");
    if (options.policy == ShmPolicy::Required) {
      return Status(weftSystemError, formatString("WEFT_TRANSPORT=shm, but shared memory with rank %d is not available: "
                                                  "%s (each pair needs %zu bytes per direction in /dev/shm)",
                                                  peer.rank, why.c_str(), bytes));
    }
    if (mine.status == kFailed) {
      WEFT_WARN("shared memory for rank %d needs %zu bytes in /dev/shm: %s; falling back to sockets %s", peer.rank,
                bytes, why.c_str(), fallback.c_str());
    } else if (mine.status == kReady) {
      WEFT_INFO("rank %d: staying on sockets: %s", peer.rank, why.c_str());
    }
    return std::unique_ptr<Connection>();
  }

  ShmSegment inbound;
  auto ring = mapPeerRing(theirs, &inbound);
  ShmAck ack{kAckMagic, static_cast<uint16_t>(ring.isOk()), 0};
  ack.remoteReadOk = canReadRemote(peer.pid, theirs.probeAddress, theirs.probeValue) ? 1 : 0;
  ShmAck theirAck{};
  WEFT_TRY(sendAll(fd, &ack, sizeof(ack), deadline, abortFlag).withContext("shared-memory setup"));
  WEFT_TRY(recvAll(fd, &theirAck, sizeof(theirAck), deadline, abortFlag).withContext("shared-memory setup"));
  outbound.unlink();  // the peer has mapped it (or given up on it): the name is no longer needed
  if (theirAck.magic != kAckMagic) {
    return Status(weftRemoteError, formatString("rank %d sent a malformed shared-memory reply", peer.rank));
  }
  if (!ring.isOk() || theirAck.mapped != 1) {
    std::string why = !ring.isOk() ? ring.status().message() : formatString("rank %d could not map this rank's ring", peer.rank);
    if (options.policy == ShmPolicy::Required) return Status(weftSystemError, "WEFT_TRANSPORT=shm: " + why);
    WEFT_WARN("shared memory with rank %d failed: %s; falling back to sockets (%s)", peer.rank, why.c_str(),
              chooseSockets.c_str());
    return std::unique_ptr<Connection>();
  }
  if (!ack.remoteReadOk || !theirAck.remoteReadOk) {
    WEFT_INFO("rank %d: process_vm_readv is not permitted between the ranks; large messages are copied twice",
              peer.rank);
  }

  ShmConnectionParams params;
  params.peerRank = peer.rank;
  params.peerName = peer.name;
  params.peerPid = peer.pid;
  params.control = std::move(streams[0]);
  params.out = {static_cast<shm::RingControl*>(outbound.data()),
                static_cast<char*>(outbound.data()) + sizeof(shm::RingControl), options.slots, options.slotBytes};
  params.in = ring.value();
  params.outbound = std::move(outbound);
  params.inbound = std::move(inbound);
  // The peer reads our buffers, so its probe of us decides whether we may hand it addresses.
  params.remoteReadMinBytes = theirAck.remoteReadOk ? options.remoteReadMinBytes : SIZE_MAX;
  params.forward = options.forward;
  params.slotStores = options.slotStores;
  streams.clear();
  return std::unique_ptr<Connection>(std::make_unique<ShmConnection>(std::move(params)));
}

}  // namespace weft::transport
