// Making communicators, shared by init, init-all and split.
#pragma once

#include <string>

#include "api/comm_handle.h"
#include "core/unique_id.h"

namespace weft::api {

// Applies a weftConfig_t (NULL: keep the defaults) to `out`; blocking init unless it says not.
Status checkConfig(const weftConfig_t* config, core::CommConfig* out);

// Runs now (runNow) or starts on a thread the collective part of init for a new handle bound to GPU
// `device` (-1: none); the local rendezvous file removeWhenReady (if any) goes once every rank
// has joined.
weftResult_t initCommunicator(weftComm_t* comm, const core::UniqueIdContents& id, int nranks, int rank,
                              const core::CommConfig& config, bool runNow, std::string removeWhenReady,
                              int device);

// A fresh id whose rendezvous this process hosts (what weftGetUniqueId hands out).
Result<core::UniqueIdContents> makeUniqueId();

}  // namespace weft::api
