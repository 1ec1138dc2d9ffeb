// Runs any Schedule: posts sends and receives to the transport as their dependencies finish
// (in each peer's posting order), runs reductions on the calling thread as their inputs land,
// spins briefly then sleeps in poll() when nothing moves, and gives up at the deadline
// (weftTimeout naming the peer it was waiting for), when a peer hangs up (weftRemoteError) or
// on abort.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <span>
#include <string>

#include "coll/schedule.h"
#include "transport/transport.h"
#include "util/deadline.h"
#include "weft/weft.h"

namespace weft::coll {

// Where the executor gets its connections (the communicator's peer mesh).
class ConnectionProvider {
 public:
  virtual ~ConnectionProvider() = default;
  virtual Result<transport::Connection*> connection(int peer, const Deadline& deadline) = 0;
  virtual std::string describe(int peer) const = 0;
};

// What one of the schedule's operations works on (Buffer::send(i), Buffer::recv(i)) and how
// its steps reduce.
struct OperationData {
  const void* send;
  void* recv;
  weftDataType_t type;
  weftRedOp_t op;  // Avg reduces as Sum; the schedule carries the divide steps
  transport::MessageTag tag;  // carried by every message of the operation
};

struct ExecutionContext {
  int nranks;
  const char* collective;  // for messages: "all-reduce", "group", ...
  Deadline deadline;
  int timeoutMs;
  const std::atomic<bool>* abortFlag;
  ConnectionProvider* connections;
  // How long waiting spins without progress before it sleeps in poll(): long when every rank on
  // the host has a core of its own (waking a sleeper costs hundreds of microseconds on some
  // machines), short when ranks share cores (a spinning rank would steal its peer's core).
  std::chrono::microseconds spinTime{2000};
  // Whether `peer` has begun a later call that this rank has not (the shared-memory arena shows
  // it): nothing more of this call will come from it. Unset where the ranks share no arena.
  std::function<bool(int peer)> peerInLaterCall;
};

// operations: one per operation the schedule's steps name (a group's, else one); scratch holds
// schedule.scratchBytes.
Status executeSchedule(const Schedule& schedule, std::span<const OperationData> operations, void* scratch,
                       const ExecutionContext& context);

}  // namespace weft::coll
