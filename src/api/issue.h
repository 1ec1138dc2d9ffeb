// Running operations in a communicator's issue order (see core/progress_engine.h).
#pragma once

#include "api/comm_handle.h"
#include "api/host_stream.h"

namespace weft::api {

// Queues `op` behind the communicator's earlier operations and behind the host stream's; the
// outcome goes to the stream. With recordAsyncError, a failure is also what
// weftCommGetAsyncError reports (as for work the caller issued on a stream and returned from).
Status enqueueOnStream(std::shared_ptr<CommState> state, std::shared_ptr<HostStream> stream, const char* fn,
                       CommOp op, bool recordAsyncError);

}  // namespace weft::api
