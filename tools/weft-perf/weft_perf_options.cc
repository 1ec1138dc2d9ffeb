#include "weft_perf_options.h"

#include <getopt.h>

#include <cstdio>
#include <string>
#include <vector>

namespace weftperf {
namespace {

void printUsage() {
  std::printf(
      "Usage: weft-perf [COLLECTIVE] [options]\n"
      "Times a Weft collective over a range of message sizes and prints an nccl-tests-style\n"
      "table. COLLECTIVE: allreduce (default), broadcast, reduce, allgather, reducescatter,\n"
      "alltoall, sendrecv, gather, scatter. Start one process per rank with a launcher (weftrun, mpirun, or a torchrun-style\n"
      "environment); rank 0 prints, the other ranks stay silent.\n"
      "\n"
      "  -b, --minbytes SIZE     smallest message (default 8)\n"
      "  -e, --maxbytes SIZE     largest message (default 128M; nccl-tests defaults to 32M)\n"
      "  -f, --stepfactor N      multiply the size by N each step (default 2);\n"
      "                          0 or 1 steps by -i instead\n"
      "  -i, --stepbytes SIZE    add SIZE each step (default 1M); used when -f is 0 or 1,\n"
      "                          or when -i is given without -f\n"
      "  -n, --iters N           timed iterations per size and placement (default 20)\n"
      "  -w, --warmup_iters N    untimed iterations before each timing (default 5)\n"
      "  -c, --check 0|1         check the results (default 1)\n"
      "  -o, --op OP             sum, prod, min, max, avg, or all (default sum)\n"
      "  -d, --datatype TYPE     int8 uint8 int32 uint32 int64 uint64 half float double\n"
      "                          bfloat16 f8e4m3 f8e5m2, or all (default float)\n"
      "  -r, --root N            root of broadcast, reduce, gather and scatter (default 0)\n"
      "  -G, --gpu               buffers in GPU memory (the launcher's local rank picks the\n"
      "                          GPU, modulo those visible), calls on a GPU stream; time\n"
      "                          includes the stream's completion\n"
      "  -H, --host-mem-alloc    host buffers from weftHostMemAlloc (as nccl-tests' -R with\n"
      "                          ncclMemAlloc): large all-reduces on one host then read the\n"
      "                          peers' buffers directly\n"
      "  -J, --json FILE         also write the rows to FILE as a JSON array\n"
      "  -h, --help              print this help\n"
      "\n"
      "SIZE is a byte count with an optional K, M or G suffix (powers of 1024); each size is\n"
      "rounded down to a multiple of the element size (and, for the collectives with per-rank\n"
      "blocks, of the rank count): as in nccl-tests, SIZE is all-gather's output, reduce-\n"
      "scatter's input and alltoall's whole buffer. Time is per iteration, the maximum over\n"
      "ranks; algbw = size / time (GB/s, 1e9 bytes/s) and busbw = algbw x 2(n-1)/n for\n"
      "allreduce, (n-1)/n for allgather, reducescatter, alltoall, gather and scatter, and 1\n"
      "for broadcast, reduce and sendrecv. sendrecv (rank r sends to r+1) has no in-place run.\n"
      "Exit status: 0 success, 1 a Weft call or a data check failed, 2 bad command line.\n");
}

std::string joinNames(const char* const* names, size_t n) {
  std::string joined;
  for (size_t i = 0; i < n; ++i) joined += (i == 0 ? "" : ", ") + std::string(names[i]);
  return joined;
}

std::string dataTypeNames() {
  std::vector<const char*> names;
  for (const DataType& type : allDataTypes()) names.push_back(type.name);
  return joinNames(names.data(), names.size());
}

std::string redOpNames() {
  std::vector<const char*> names;
  for (const RedOp& op : allRedOps()) names.push_back(op.name);
  return joinNames(names.data(), names.size());
}

// -o and -d: `arg` names one of `all` (as `find` knows it), or is "all" for every one. False
// when it is neither.
template <typename T, typename Find>
bool pick(const std::string& arg, const std::vector<T>& all, Find find, std::vector<const T*>* chosen) {
  chosen->clear();
  if (arg == "all") {
    for (const T& item : all) chosen->push_back(&item);
  } else if (const T* item = find(arg)) {
    chosen->push_back(item);
  }
  return !chosen->empty();
}

}  // namespace

int parseArgs(int argc, char** argv, Options* options) {
  static const std::string kShortOptions = weftperf::shortOptions("o:d:r:GHh");
  static const std::vector<option> kLongOptions = weftperf::longOptions({
      {"op", required_argument, nullptr, 'o'},
      {"datatype", required_argument, nullptr, 'd'},
      {"root", required_argument, nullptr, 'r'},
      {"gpu", no_argument, nullptr, 'G'},
      {"host-mem-alloc", no_argument, nullptr, 'H'},
      {"help", no_argument, nullptr, 'h'},
  });
  const int status = weftperf::readOptions(
      argc, argv, kTool, kShortOptions, kLongOptions.data(), options, printUsage, [&](int c, const std::string& arg) {
        switch (c) {
          case 'o':
            if (!pick(arg, allRedOps(), findRedOp, &options->ops)) {
              return weftperf::usageError(kTool, "-o: unknown operation '%s' (use %s, or all)", arg.c_str(),
                                          redOpNames().c_str());
            }
            break;
          case 'd':
            if (!pick(arg, allDataTypes(), findDataType, &options->types)) {
              return weftperf::usageError(kTool, "-d: unknown data type '%s' (use %s, or all)", arg.c_str(),
                                          dataTypeNames().c_str());
            }
            break;
          case 'r': {
            long root = 0;
            if (!parseInt(arg, 0, 1 << 30, &root)) return weftperf::usageError(kTool, "-r: bad root '%s'", arg.c_str());
            options->root = static_cast<int>(root);
            break;
          }
          case 'G':
            options->gpu = true;
            break;
          case 'H':
            options->hostMemAlloc = true;
            break;
        }
        return -1;
      });
  if (status >= 0) return status;
  if (argc - optind > 1) return weftperf::usageError(kTool, "unexpected argument '%s'", argv[optind + 1]);
  if (argc - optind == 1) {
    options->collective = findCollective(argv[optind]);
    if (options->collective == nullptr) {
      std::vector<const char*> names;
      for (const Collective& known : allCollectives()) names.push_back(known.name);
      return weftperf::usageError(kTool, "unknown collective '%s' (available: %s)", argv[optind],
                                  joinNames(names.data(), names.size()).c_str());
    }
  }
  if (std::string error; !weftperf::finishCommonOptions(options, &error)) {
    return weftperf::usageError(kTool, "%s", error.c_str());
  }
  if (options->types.empty()) options->types.push_back(findDataType("float"));
  if (options->ops.empty() || !options->collective->reduces) options->ops.assign(1, findRedOp("sum"));
  return -1;
}

}  // namespace weftperf
