// Running operations in a communicator's issue order (see core/progress_engine.h).
#pragma once

#include <vector>

#include "api/comm_handle.h"
#include "api/host_stream.h"

namespace weft::api {

// Queues `op` behind the communicator's earlier operations and behind the host stream's; the
// outcome goes to the stream. With recordAsyncError, a failure is also what
// weftCommGetAsyncError reports (as for work the caller issued on a stream and returned from).
Status enqueueOnStream(std::shared_ptr<CommState> state, std::shared_ptr<HostStream> stream, const char* fn,
                       CommOp op, bool recordAsyncError);

// Several communicators' operations as one place on the stream (a group's calls on one stream):
// each queued on its communicator's worker, they wait together for the stream's earlier
// operations and then run side by side, since each may wait on its peers' part in another of
// them; the stream's next operation waits for all. An operation that cannot be queued ends
// with that error (returned), the others still run.
struct StreamPart {
  std::shared_ptr<CommState> state;
  CommOp op;
};
Status enqueueOnStream(std::vector<StreamPart> parts, std::shared_ptr<HostStream> stream, const char* fn,
                       bool recordAsyncError);

}  // namespace weft::api
