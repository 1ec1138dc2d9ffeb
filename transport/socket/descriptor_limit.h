// Room for the descriptors a full mesh of socket streams takes. A pair of ranks on two hosts has
// a stream per channel (up to 8, core/rails.h), so a rank of a few hundred opens more sockets
// than the usual soft limit of 1024. The soft limit is raised, up to the hard one, only when the
// streams would not fit under it: a program that select()s keeps its descriptors below 1024
// where Weft needs no more.
#pragma once

#include <cstddef>

namespace weft::transport {

// Makes room for `more` descriptors beyond those open now (and a margin for the transports'
// own): raises RLIMIT_NOFILE's soft limit where they would not fit, as far as the hard limit
// allows, with an INFO line; a WARN line names the count where even the hard limit is too low
// (the connect that runs out then fails with "Too many open files").
void makeRoomForDescriptors(size_t more);

}  // namespace weft::transport
