// weft-perf's command line: its options and their parsing (the flags every driver shares are
// in perf_common.h).
#pragma once

#include <vector>

#include "check_data.h"
#include "collectives.h"
#include "perf_common.h"

namespace weftperf {

inline constexpr const char* kTool = "weft-perf";

struct Options : CommonOptions {
  const Collective* collective = &allCollectives().front();
  std::vector<const DataType*> types;
  std::vector<const RedOp*> ops;
  int root = 0;
  bool gpu = false;  // buffers in device memory, calls on a GPU stream
  bool hostMemAlloc = false;  // host buffers from weftHostMemAlloc
};

// Returns kExitOk after --help, kExitUsage for a bad command line, or -1 to go on.
int parseArgs(int argc, char** argv, Options* options);

}  // namespace weftperf
