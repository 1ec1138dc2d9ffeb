// The one-host rendezvous, for ranks given no root address: rank 0 leaves its id in a private
// file named by the job, with its pid, and the others read it. A file whose rank 0 is gone is
// left from an earlier run: readers pass over it and rank 0 replaces it. A file whose rank 0 is
// alive belongs to that job: another job of the same name is refused rather than let in.
#pragma once

#include <string>

#include "core/unique_id.h"

namespace weft::core {

// /tmp/weft-<uid>-<hash of jobKey>.id
std::string localRendezvousPath(const std::string& jobKey);

// weftInvalidUsage, naming it, when a live rank 0 other than this process owns the file at
// `path` (a pid now held by a process that started after the file was written is not its
// writer); ok when there is no such file.
Status checkNotHeldByAnotherJob(const std::string& path);

// Publishes `id` at `path` (mode 0600) as this process's, replacing only a file no live
// process owns (or this process's own); weftInvalidUsage naming the owner otherwise.
Status publishLocalId(const std::string& path, const UniqueIdContents& id);

// Waits until a live rank 0's id is at `path`, or the deadline passes.
Result<UniqueIdContents> readLocalId(const std::string& path, int timeoutMs);

// Removes the file at `path` if this process wrote it: after a rendezvous (or its failure) the
// name may already be another run's.
void withdrawLocalId(const std::string& path);

}  // namespace weft::core
