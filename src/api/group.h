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
// Records a failed call: weftGroupEnd will return this error and issue nothing.
void failGroup(weftResult_t code);
// Whether the calling thread's open group holds calls on this communicator.
bool groupHolds(const CommState* state);
// A blocking init started inside the group (on its own thread, as a non-blocking one):
// the outermost weftGroupEnd waits for it, so one thread can init several ranks, as NCCL's
// ncclGroupStart / ncclCommInitRank... / ncclGroupEnd.
void addInitToGroup(std::shared_ptr<CommState> state);

}  // namespace weft::api
