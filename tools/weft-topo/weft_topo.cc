// weft-topo: prints what Weft discovers about this machine (or an hwloc XML file), and the plan
// it would make for a layout of identical hosts: rings per channel, double binary trees, the
// NIC of every rank and the transport of every pair; --dot writes the plan for Graphviz.
#include <getopt.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "coll/arena_allreduce.h"
#include "coll/tuner.h"
#include "core/bootstrap_wire.h"
#include "plan/planner.h"
#include "topo/topology.h"
#include "weft-perf/perf_common.h"

namespace {

constexpr const char* kTool = "weft-topo";

void usage() {
  std::printf(
      "Usage: weft-topo [--topo FILE.xml] [--hosts H] [--ranks-per-host R] [--no-gpus] [--dot FILE|-]\n"
      "       weft-topo [--topo FILE.xml] --predict N [--socket]\n"
      "Prints the topology (this machine's, or an hwloc XML file's) and the plan for H hosts\n"
      "like it with R ranks each (default 1 host, one rank per GPU or 2 without GPUs).\n"
      "  -t, --topo FILE          an hwloc XML file instead of the live machine (as WEFT_TOPO_FILE)\n"
      "  -H, --hosts H            hosts in the layout (default 1)\n"
      "  -R, --ranks-per-host R   ranks per host (default: the GPU count, or 2); H x R at most %d\n"
      "      --no-gpus            host-memory ranks even where the host has GPUs\n"
      "  -d, --dot FILE           also write the plan as Graphviz; -: the graph alone on stdout,\n"
      "                           the rest on stderr\n"
      "      --predict N          instead: the tuner's predicted all-reduce times for N ranks on one\n"
      "                           such host over shared memory (--socket: sockets), 8 B to 64 MiB,\n"
      "                           float32, per algorithm, and its choice, as JSON lines\n"
      "Exit status: 0 success, 1 the topology could not be read or the output written, 2 bad\n"
      "command line.\n",
      weft::core::kMaxRanks);
}

// 0, or 1 with a message where what went to stdout could not all be written (a full disk, a
// closed pipe): a truncated plan must not pass for a whole one.
int exitStatusAfterOutput() {
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "weft-topo: cannot write the standard output\n");
    return 1;
  }
  return 0;
}

// The tuner's predictions for float32 all-reduces of n ranks on one host like `host`, as the
// communicator would make them there: the planned trees and the host's crowding included.
int printPredictions(const weft::topo::HostTopology& host, int n, bool socketLinks) {
  using namespace weft::coll;
  auto loaded = loadTuningConfig();
  if (!loaded.isOk()) {
    std::fprintf(stderr, "weft-topo: %s\n", loaded.status().message().c_str());
    return 1;
  }
  TuningConfig config = loaded.value();
  chooseChunkBytes(&config, socketLinks);
  std::vector<weft::plan::RankPlacement> ranks;
  for (int l = 0; l < n; ++l) ranks.push_back(weft::plan::placeRank(host, -1, -1, l));
  const auto plan = weft::plan::makePlan(ranks);
  // One host over shared memory: small all-reduces may take the arena.
  CommLayout layout = weft::plan::commLayoutOf(weft::plan::rankOrderOf(plan), ranks);
  layout.arenaBytes = socketLinks ? 0 : kArenaMaxBytes;
  const LinkCost link = socketLinks ? defaultSocketCost() : defaultSharedMemoryCost();
  for (size_t bytes = 8; bytes <= (size_t{64} << 20); bytes *= 2) {
    std::printf("{\"nranks\": %d, \"size\": %zu", n, bytes);
    for (Algorithm a : {Algorithm::Ring, Algorithm::Tree, Algorithm::RecursiveDoubling, Algorithm::OneShot}) {
      std::printf(", \"%s\": %.3f", algorithmName(a),
                  predictUs(link, layout, Collective::AllReduce, a, bytes, sizeof(float), config.pipeline.chunkBytes));
    }
    std::printf(", \"choice\": \"%s\"}\n",
                algorithmName(chooseAlgorithm(config, link, layout, Collective::AllReduce, bytes, sizeof(float))));
  }
  return exitStatusAfterOutput();
}

}  // namespace

int main(int argc, char** argv) {
  std::string topoFile, dotFile;
  long hosts = 1, perHost = 0;
  bool gpus = true;
  long predictRanks = 0;
  bool socketLinks = false;
  bool layoutGiven = false;  // --hosts, --ranks-per-host, --no-gpus or --dot: not for --predict
  static const option kLong[] = {{"topo", required_argument, nullptr, 't'},
                                 {"hosts", required_argument, nullptr, 'H'},
                                 {"ranks-per-host", required_argument, nullptr, 'R'},
                                 {"no-gpus", no_argument, nullptr, 'G'},
                                 {"dot", required_argument, nullptr, 'd'},
                                 {"predict", required_argument, nullptr, 'P'},
                                 {"socket", no_argument, nullptr, 'S'},
                                 {"help", no_argument, nullptr, 'h'},
                                 {nullptr, 0, nullptr, 0}};
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, ":t:H:R:d:h", kLong, nullptr)) != -1) {
    const std::string arg = optarg ? optarg : "";
    switch (c) {
      case 't':
        if (arg.empty()) return weftperf::usageError(kTool, "--topo: an empty file name");
        topoFile = arg;
        break;
      case 'H':
        if (!weftperf::parseInt(arg, 1, 4096, &hosts)) return weftperf::usageError(kTool, "--hosts: 1 to 4096");
        layoutGiven = true;
        break;
      case 'R':
        if (!weftperf::parseInt(arg, 1, 1024, &perHost)) return weftperf::usageError(kTool, "--ranks-per-host: 1 to 1024");
        layoutGiven = true;
        break;
      case 'G':
        gpus = false;
        layoutGiven = true;
        break;
      case 'd':
        if (arg.empty()) return weftperf::usageError(kTool, "--dot: an empty file name");
        dotFile = arg;
        layoutGiven = true;
        break;
      case 'P':
        if (!weftperf::parseInt(arg, 2, 4096, &predictRanks)) return weftperf::usageError(kTool, "--predict: 2 to 4096 ranks");
        break;
      case 'S': socketLinks = true; break;
      case 'h': usage(); return 0;
      // optopt names a short option (argv[optind - 1] may be a group of them, "-Zh"); 0 a long one.
      case ':':
        if (optopt != 0) return weftperf::usageError(kTool, "option -%c needs a value", optopt);
        return weftperf::usageError(kTool, "option %s needs a value", argv[optind - 1]);
      default:
        if (optopt != 0) return weftperf::usageError(kTool, "unknown option -%c", optopt);
        return weftperf::usageError(kTool, "unknown option %s", argv[optind - 1]);
    }
  }
  if (optind < argc) return weftperf::usageError(kTool, "unexpected argument '%s'", argv[optind]);
  if (predictRanks > 0 && layoutGiven) {
    return weftperf::usageError(kTool, "--predict takes no --hosts, --ranks-per-host, --no-gpus or --dot");
  }
  if (predictRanks == 0 && socketLinks) return weftperf::usageError(kTool, "--socket goes with --predict");

  auto loaded = topoFile.empty() ? weft::topo::discoverTopology() : weft::topo::loadTopologyXml(topoFile);
  if (!loaded.isOk()) {
    std::fprintf(stderr, "weft-topo: %s\n", loaded.status().message().c_str());
    return 1;
  }
  const weft::topo::HostTopology& host = loaded.value();
  if (predictRanks > 0) return printPredictions(host, static_cast<int>(predictRanks), socketLinks);
  const int gpuCount = gpus ? static_cast<int>(host.gpus.size()) : 0;
  if (perHost == 0) perHost = gpuCount > 0 ? gpuCount : 2;
  if (hosts * perHost > weft::core::kMaxRanks) {
    return weftperf::usageError(kTool, "%ld hosts x %ld ranks: more than Weft's %d ranks", hosts, perHost,
                                weft::core::kMaxRanks);
  }
  // With the graph on stdout, everything else goes to stderr, so that `--dot - | dot` works.
  FILE* text = dotFile == "-" ? stderr : stdout;
  std::fprintf(text, "%s", weft::topo::describeTopology(host).c_str());

  const auto ranks = weft::plan::layoutHosts(host, static_cast<int>(hosts), static_cast<int>(perHost), gpus);
  std::fprintf(text, "\nranks (host, NUMA node, GPU, nearest NIC):\n");
  for (size_t r = 0; r < ranks.size(); ++r) {
    const auto& p = ranks[r];
    std::string nic = p.preferredNic >= 0 ? host.nics[static_cast<size_t>(p.preferredNic)].name : "none";
    std::string gpu = p.gpu >= 0 ? host.gpus[static_cast<size_t>(p.gpu)].name : "none";
    std::fprintf(text, "  rank %zu: host %d, NUMA %d, GPU %s, NIC %s\n", r, p.host, p.numaNode, gpu.c_str(), nic.c_str());
  }
  const auto plan = weft::plan::makePlan(ranks);
  std::fprintf(text, "\nplan: %s", weft::plan::describePlan(plan, ranks).c_str());
  if (!dotFile.empty()) {
    const std::string dot = weft::plan::planToDot(plan, ranks);
    if (dotFile == "-") {
      std::printf("%s", dot.c_str());
    } else {
      std::ofstream out(dotFile);
      out << dot;
      out.close();  // a write error may show only when the buffer is flushed
      if (!out) {
        std::fprintf(stderr, "weft-topo: cannot write %s\n", dotFile.c_str());
        return 1;
      }
    }
  }
  return exitStatusAfterOutput();
}
