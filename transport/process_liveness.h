// Whether a peer process on this host is still there, for the transports: a rank killed while a
// child it forked (a DataLoader worker, say) holds its sockets shows its peers no EOF, so they
// look at the process itself. Its pid means that process only within one pid namespace
// (containers on one kernel may each have their own), so pids compare only where the namespaces
// are known to be the same.
#pragma once

#include <cstdint>

namespace weft::transport {

// This process's pid namespace: the inode of /proc/self/ns/pid (a 32-bit number in Linux); 0
// where it cannot be told.
uint32_t pidNamespaceId();

// Whether the process is gone or going: no such pid, or every one of its threads a zombie or
// exiting. A zombie its parent has not reaped yet (a launcher that waits for its last child)
// counts, and so does a rank killed a moment ago, whose closed sockets its peers may see before
// it is a zombie. When in doubt it is alive: this fails live collectives when wrong. `pid` must
// be in this process's pid namespace.
bool processGone(long pid);

}  // namespace weft::transport
