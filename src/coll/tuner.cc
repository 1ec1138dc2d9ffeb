#include "coll/tuner.h"

#include <strings.h>

#include <sstream>

#include "util/env.h"

namespace weft::coll {

const char* collectiveName(Collective collective) {
  switch (collective) {
    case Collective::AllReduce: return "all-reduce";
    case Collective::Broadcast: return "broadcast";
    case Collective::Reduce: return "reduce";
    case Collective::AllGather: return "all-gather";
    case Collective::ReduceScatter: return "reduce-scatter";
    case Collective::AlltoAll: return "alltoall";
    case Collective::Gather: return "gather";
    case Collective::Scatter: return "scatter";
    case Collective::Send: return "send";
    case Collective::Recv: return "recv";
  }
  return "?";
}

const char* algorithmName(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::Ring: return "ring";
    case Algorithm::Tree: return "tree";
    case Algorithm::RecursiveDoubling: return "recursive-doubling";
    case Algorithm::OneShot: return "one-shot";
    case Algorithm::Direct: return "direct";
  }
  return "?";
}

bool hasAlgorithm(Collective collective, Algorithm algorithm) {
  switch (collective) {
    case Collective::AllReduce: return algorithm != Algorithm::Direct;
    case Collective::Broadcast:
      return algorithm == Algorithm::Ring || algorithm == Algorithm::Tree || algorithm == Algorithm::OneShot;
    case Collective::Reduce: return algorithm == Algorithm::Ring || algorithm == Algorithm::Tree;
    case Collective::AllGather:
    case Collective::ReduceScatter: return algorithm == Algorithm::Ring || algorithm == Algorithm::OneShot;
    default: return algorithm == Algorithm::Direct;
  }
}

namespace {

std::optional<Algorithm> parseAlgorithm(const std::string& name) {
  const char* s = name.c_str();
  if (strcasecmp(s, "ring") == 0) return Algorithm::Ring;
  if (strcasecmp(s, "tree") == 0) return Algorithm::Tree;
  if (strcasecmp(s, "rd") == 0 || strcasecmp(s, "recursive-doubling") == 0) return Algorithm::RecursiveDoubling;
  if (strcasecmp(s, "oneshot") == 0 || strcasecmp(s, "one-shot") == 0) return Algorithm::OneShot;
  if (strcasecmp(s, "direct") == 0) return Algorithm::Direct;
  return std::nullopt;
}

// "allreduce", "all-reduce" and "AllReduce" all name Collective::AllReduce.
std::optional<Collective> parseCollective(const std::string& name) {
  std::string squeezed;
  for (char c : name) {
    if (c != '-' && c != '_') squeezed += static_cast<char>(tolower(static_cast<unsigned char>(c)));
  }
  for (int c = 0; c < kCollectiveCount; ++c) {
    std::string known;
    for (const char* p = collectiveName(static_cast<Collective>(c)); *p; ++p) {
      if (*p != '-') known += *p;
    }
    if (squeezed == known) return static_cast<Collective>(c);
  }
  return std::nullopt;
}

Status parseForcedAlgorithms(const std::string& text, TuningConfig* config) {
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    auto colon = item.find(':');
    std::string algoName = colon == std::string::npos ? item : item.substr(colon + 1);
    auto algorithm = parseAlgorithm(algoName);
    if (!algorithm) {
      return Status(weftInvalidArgument, "WEFT_ALGO=\"" + text + "\": \"" + algoName +
                                             "\" is not one of: ring, tree, rd, oneshot, direct");
    }
    if (colon == std::string::npos) {  // every collective that has it
      for (int c = 0; c < kCollectiveCount; ++c) {
        if (hasAlgorithm(static_cast<Collective>(c), *algorithm)) config->forced[static_cast<size_t>(c)] = algorithm;
      }
      continue;
    }
    auto collective = parseCollective(item.substr(0, colon));
    if (!collective) {
      return Status(weftInvalidArgument, "WEFT_ALGO=\"" + text + "\": \"" + item.substr(0, colon) +
                                             "\" is not a collective (allreduce, broadcast, reduce, allgather, "
                                             "reducescatter, alltoall, gather, scatter, send, recv)");
    }
    if (!hasAlgorithm(*collective, *algorithm)) {
      return Status(weftInvalidArgument, "WEFT_ALGO=\"" + text + "\": " + collectiveName(*collective) +
                                             " has no " + algorithmName(*algorithm) + " algorithm");
    }
    config->forced[static_cast<size_t>(*collective)] = algorithm;
  }
  return Status::ok();
}

}  // namespace

uint16_t settingsDigest(const TuningConfig& config, int streamsPerPeer) {
  std::string text;
  for (const auto& forced : config.forced) text += forced ? algorithmName(*forced) : "-";
  text += formatString("|%zu%s|%d|%zu|%zu|%zu|%d", config.pipeline.chunkBytes, config.chunkBytesSet ? "" : "?",
                       config.pipeline.slots, config.recursiveDoublingMaxBytes, config.oneShotMaxBytes,
                       config.treeMaxBytes, config.measureLinks ? 1 : 0);
  text += formatString("|%d", streamsPerPeer);
  uint32_t h = 2166136261u;  // FNV-1a, folded to 16 bits
  for (unsigned char c : text) h = (h ^ c) * 16777619u;
  return static_cast<uint16_t>(h ^ (h >> 16));
}

Result<TuningConfig> loadTuningConfig() {
  TuningConfig config;
  if (auto algo = envString("WEFT_ALGO")) WEFT_TRY(parseForcedAlgorithms(*algo, &config));
  if (auto tune = envString("WEFT_TUNE")) {
    if (*tune == "measure") config.measureLinks = true;
    else if (*tune != "defaults") return Status(weftInvalidArgument, "WEFT_TUNE=\"" + *tune + "\" is not measure or defaults");
  }
  // A chunk is a step of every pipeline's schedule: the chunk has a floor (kMinChunkBytes).
  struct Setting {
    const char* name;
    size_t* target;
    uint64_t min;
  };
  for (const Setting& s : {Setting{"WEFT_CHUNK_BYTES", &config.pipeline.chunkBytes, kMinChunkBytes},
                           Setting{"WEFT_RD_MAX_BYTES", &config.recursiveDoublingMaxBytes, 1},
                           Setting{"WEFT_ONESHOT_MAX_BYTES", &config.oneShotMaxBytes, 1},
                           Setting{"WEFT_TREE_MAX_BYTES", &config.treeMaxBytes, 1},
                           Setting{"WEFT_STREAMING_MIN_BYTES", &config.pipeline.streamingMinBytes, 1}}) {
    WEFT_ASSIGN_OR_RETURN(auto bytes, envByteSize(s.name, s.min, uint64_t{1} << 32));
    if (bytes) *s.target = static_cast<size_t>(*bytes);
  }
  config.chunkBytesSet = envString("WEFT_CHUNK_BYTES").has_value();
  return config;
}

// Where ranks share CPUs, how much cheaper than the ring the model must price a tree all-reduce
// for the tuner to take it. The tree's price there assumes its two chains have a CPU each at the
// same moments, which a busy host (a VM whose other vCPU the hypervisor takes) often does not
// give, where the ring's steps spread over every rank. On 4 and 8 ranks of 2 CPUs, 32-512 KiB,
// the 32 rows of 11 tuner records (2026-11-22 to 2026-12-04) where the model priced the tree
// under the ring measured the tree at 0.75-1.67x the ring, median 1.0, and the one where the
// tuner took it ran 1.67x; taking the ring in all of them would have cost at most 1.33x.
constexpr double kCrowdedTreeMargin = 0.25;

void chooseChunkBytes(TuningConfig* config, bool anySocket) {
  if (!config->chunkBytesSet) config->pipeline.chunkBytes = anySocket ? kSocketChunkBytes : kSharedMemoryChunkBytes;
}

Algorithm chooseAlgorithm(const TuningConfig& config, const LinkCost& link, const CommLayout& layout,
                          Collective collective, size_t bytes, size_t elementSize) {
  const int nranks = layout.nranks;
  if (auto forced = config.forced[static_cast<size_t>(collective)]) return *forced;
  const size_t fanOutBytes = bytes * static_cast<size_t>(std::max(nranks - 1, 0));
  auto allowed = [&](Algorithm a) {
    if (!hasAlgorithm(collective, a)) return false;
    switch (a) {
      // The cap bounds the scratch and the messages of the executor's one-shot; an all-gather
      // or a broadcast through the arena has neither, and copies less than the ring at any size.
      // The arena's all-reduce keeps the cap: every rank reduces every peer's input there.
      case Algorithm::OneShot:
        return fanOutBytes <= config.oneShotMaxBytes ||
               (collective != Collective::AllReduce && runsOnArena(layout, collective, a, bytes));
      case Algorithm::RecursiveDoubling: return bytes <= config.recursiveDoublingMaxBytes;
      case Algorithm::Tree: return bytes <= config.treeMaxBytes && nranks > 2;  // on 2 ranks, the chain
      default: return true;
    }
  };
  Algorithm best = hasAlgorithm(collective, Algorithm::Ring) ? Algorithm::Ring : Algorithm::Direct;
  double bestUs = predictUs(link, layout, collective, best, bytes, elementSize, config.pipeline.chunkBytes);
  const double ringUs = bestUs;  // `best` is the ring here wherever a crowded tree is weighed
  for (Algorithm a : {Algorithm::OneShot, Algorithm::RecursiveDoubling, Algorithm::Tree}) {
    if (!allowed(a)) continue;
    const double us = predictUs(link, layout, collective, a, bytes, elementSize, config.pipeline.chunkBytes);
    const bool crowdedTree = a == Algorithm::Tree && collective == Collective::AllReduce && layout.ranksPerCpu > 1;
    if (crowdedTree && us > ringUs * (1 - kCrowdedTreeMargin)) continue;
    // Only a clear win displaces the cheapest so far, the ring first: on a host with 2 CPUs the
    // model prices a one-step tree over its chain exactly as the ring, and rounding must not
    // choose between them.
    if (us < bestUs * (1 - 1e-9)) {
      bestUs = us;
      best = a;
    }
  }
  return best;
}

std::string describePredictions(const TuningConfig& config, const LinkCost& link, const CommLayout& layout,
                                Collective collective, size_t bytes, size_t elementSize) {
  std::string text;
  for (Algorithm a : {Algorithm::Ring, Algorithm::Tree, Algorithm::RecursiveDoubling, Algorithm::OneShot,
                      Algorithm::Direct}) {
    if (!hasAlgorithm(collective, a)) continue;
    text += formatString("%s%s %.1f us", text.empty() ? "" : ", ", algorithmName(a),
                         predictUs(link, layout, collective, a, bytes, elementSize, config.pipeline.chunkBytes));
  }
  return text;
}

Schedule buildSchedule(const CollectiveShape& shape, Algorithm algorithm, const PipelineParams& pipeline) {
  switch (shape.collective) {
    case Collective::AllReduce:
      switch (algorithm) {
        case Algorithm::Tree: return buildTreeAllReduce(shape, pipeline);
        case Algorithm::RecursiveDoubling: return buildRecursiveDoublingAllReduce(shape);
        case Algorithm::OneShot: return buildOneShotAllReduce(shape);
        default: return buildRingAllReduce(shape, pipeline);
      }
    case Collective::Broadcast:
      if (algorithm == Algorithm::OneShot) return buildOneShotBroadcast(shape);
      return algorithm == Algorithm::Tree ? buildTreeBroadcast(shape, pipeline) : buildRingBroadcast(shape, pipeline);
    case Collective::Reduce:
      return algorithm == Algorithm::Tree ? buildTreeReduce(shape, pipeline) : buildRingReduce(shape, pipeline);
    case Collective::AllGather:
      return algorithm == Algorithm::OneShot ? buildOneShotAllGather(shape) : buildRingAllGather(shape, pipeline);
    case Collective::ReduceScatter:
      return algorithm == Algorithm::OneShot ? buildOneShotReduceScatter(shape)
                                             : buildRingReduceScatter(shape, pipeline);
    case Collective::AlltoAll: return buildAlltoAll(shape);
    case Collective::Gather: return buildGather(shape);
    case Collective::Scatter: return buildScatter(shape);
    case Collective::Send: return buildSend(shape);
    case Collective::Recv: return buildRecv(shape);
  }
  return {};
}

}  // namespace weft::coll
