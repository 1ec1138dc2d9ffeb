// Runs any Schedule: posts sends and receives to the transport as their dependencies finish
// (in each peer's posting order), runs reductions on the calling thread as their inputs land,
// spins briefly then sleeps in poll() when nothing moves, and gives up at the deadline or on
// abort with an error naming the peer it was waiting for.
#pragma once

#include <atomic>
#include <chrono>
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

struct ExecutionBuffers {
  const void* send;
  void* recv;
  void* scratch;
};

struct ExecutionContext {
  weftDataType_t type;
  weftRedOp_t op;  // Avg reduces as Sum; the schedule carries the divide steps
  int nranks;
  const char* collective;  // for messages: "all-reduce"
  Deadline deadline;
  int timeoutMs;
  const std::atomic<bool>* abortFlag;
  ConnectionProvider* connections;
  // How long waiting spins without progress before it sleeps in poll(): long when every rank on
  // the host has a core of its own (waking a sleeper costs hundreds of microseconds on some
  // machines), short when ranks share cores (a spinning rank would steal its peer's core).
  std::chrono::microseconds spinTime{2000};
};

Status executeSchedule(const Schedule& schedule, const ExecutionBuffers& buffers, const ExecutionContext& context);

}  // namespace weft::coll
