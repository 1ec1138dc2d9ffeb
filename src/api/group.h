// weftGroupStart / weftGroupEnd: the calling thread's open group collects checked calls, and
// the outermost weftGroupEnd issues them, one merged operation per communicator.
#pragma once

#include "api/comm_handle.h"
#include "core/collective_call.h"

namespace weft::api {

bool groupIsOpen();
// Adds a checked call to the calling thread's open group.
void addToGroup(std::shared_ptr<CommState> state, weftStream_t stream, const core::CollectiveCall& call,
                bool onDevice);
// Records a failed call: weftGroupEnd will return this error, with its message, and issue
// nothing. Every call that fails inside an open group records itself here.
void failGroup(const Status& status);
// reportError for a call that would belong to the thread's open group: fails the group too.
weftResult_t reportCallError(const Status& status, CommState* state = nullptr);
// Whether the calling thread's open group holds calls on this communicator.
bool groupHolds(const CommState* state);
// Whether it holds calls on this stream (which run only at weftGroupEnd).
bool groupHoldsStream(weftStream_t stream);
// An init started inside the group, on its own thread. A blocking one the outermost
// weftGroupEnd waits for, so one thread can init several ranks, as NCCL's ncclGroupStart /
// ncclCommInitRank... / ncclGroupEnd; a non-blocking one it leaves running, and then returns
// weftInProgress, as NCCL's does, for the caller to poll weftCommGetAsyncError.
void addInitToGroup(std::shared_ptr<CommState> state, bool blocking);

}  // namespace weft::api
