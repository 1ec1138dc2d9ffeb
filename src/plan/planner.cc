#include "plan/planner.h"

#include <algorithm>
#include <tuple>

#include "util/status.h"

namespace weft::plan {

const char* transportName(Transport transport) {
  switch (transport) {
    case Transport::Self: return "self";
    case Transport::Shm: return "shm";
    case Transport::Socket: return "socket";
  }
  return "?";
}

namespace {

void linkChildren(Tree* t) {
  t->children.assign(t->parent.size(), {});
  for (size_t r = 0; r < t->parent.size(); ++r) {
    if (t->parent[r] >= 0) t->children[static_cast<size_t>(t->parent[r])].push_back(static_cast<int>(r));
  }
}

// The tree over n nodes in which node `role` of binaryTree plays the part of node `who(role)`.
template <typename Who>
Tree relabeled(const Tree& base, int n, Who who) {
  Tree t;
  t.parent.assign(static_cast<size_t>(n), -1);
  for (int b = 0; b < static_cast<int>(base.parent.size()); ++b) {
    const int p = base.parent[static_cast<size_t>(b)];
    t.parent[static_cast<size_t>(who(b))] = p < 0 ? -1 : who(p);
  }
  t.root = who(base.root);
  return t;
}

}  // namespace

Tree binaryTree(int n) {
  Tree t;
  t.root = n > 0 ? 0 : -1;
  t.parent.assign(static_cast<size_t>(std::max(n, 0)), -1);
  // Node r with lowest set bit b hangs below r - b + 2b, or below r - b when that is out of
  // range: odd nodes are leaves, even nodes interior, node 0 the root (NCCL's btree).
  for (int r = 1; r < n; ++r) {
    const int bit = r & -r;
    int up = (r ^ bit) | (bit << 1);
    if (up >= n) up = r ^ bit;
    t.parent[static_cast<size_t>(r)] = up;
  }
  linkChildren(&t);
  return t;
}

std::array<Tree, 2> doubleBinaryTree(int n) {
  if (n <= 2) {
    Tree second = relabeled(binaryTree(n), n, [n](int b) { return n - 1 - b; });
    linkChildren(&second);
    return {binaryTree(n), second};
  }
  // Over an even count m, the mirror image (node r plays m-1-r) swaps odd and even, so the
  // interior nodes of the two trees are disjoint. An odd n builds both over n-1 nodes and
  // hangs node n-1 as a leaf below each root, which has only one child.
  const int m = n % 2 == 0 ? n : n - 1;
  Tree first = relabeled(binaryTree(m), n, [](int b) { return b; });
  Tree second = relabeled(binaryTree(m), n, [m](int b) { return m - 1 - b; });
  if (m != n) {
    first.parent[static_cast<size_t>(n - 1)] = first.root;
    second.parent[static_cast<size_t>(n - 1)] = second.root;
  }
  linkChildren(&first);
  linkChildren(&second);
  return {first, second};
}

namespace {

// Each host's ranks in ring order: NUMA node, GPU, rank.
std::vector<std::vector<int>> ranksByHost(const std::vector<RankPlacement>& ranks) {
  int hosts = 0;
  for (const auto& r : ranks) hosts = std::max(hosts, r.host + 1);
  std::vector<std::vector<int>> byHost(static_cast<size_t>(hosts));
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) byHost[static_cast<size_t>(ranks[static_cast<size_t>(r)].host)].push_back(r);
  for (auto& local : byHost) {
    std::stable_sort(local.begin(), local.end(), [&](int a, int b) {
      const RankPlacement& pa = ranks[static_cast<size_t>(a)];
      const RankPlacement& pb = ranks[static_cast<size_t>(b)];
      return std::tuple(pa.numaNode, pa.gpu < 0 ? 1 << 30 : pa.gpu) < std::tuple(pb.numaNode, pb.gpu < 0 ? 1 << 30 : pb.gpu);
    });
  }
  return byHost;
}

// Host h's segment of channel c's ring: it ends at the first rank whose NIC is c (it leaves the
// host there) and starts at that rank's neighbour in ring order (the next host's traffic enters
// there, through the same NIC): the one after it, or the one before it (the segment then runs
// the other way round the host) where that one is nearer NIC c: on it (often the other rank on
// that NIC), else on the leaving rank's NUMA node (where a NIC per GPU leaves the rank after it
// on the other socket).
std::vector<int> segment(const std::vector<int>& local, const std::vector<RankPlacement>& ranks, int channel) {
  std::vector<int> out = local;
  const size_t n = local.size();
  if (n < 2) return out;
  auto exit = std::find_if(local.begin(), local.end(),
                           [&](int r) { return ranks[static_cast<size_t>(r)].preferredNic == channel; });
  size_t last = exit != local.end() ? static_cast<size_t>(exit - local.begin()) : static_cast<size_t>(channel) % n;
  const RankPlacement& leaving = ranks[static_cast<size_t>(local[last])];
  auto nearness = [&](size_t i) {
    const RankPlacement& p = ranks[static_cast<size_t>(local[i])];
    return p.preferredNic == channel ? 2 : p.numaNode == leaving.numaNode ? 1 : 0;
  };
  if (n > 2 && nearness((last + n - 1) % n) > nearness((last + 1) % n)) {
    std::reverse(out.begin(), out.end());
    last = n - 1 - last;
  }
  std::rotate(out.begin(), out.begin() + static_cast<long>((last + 1) % n), out.end());
  return out;
}

}  // namespace

Plan makePlan(const std::vector<RankPlacement>& ranks, TransportPolicy policy) {
  Plan plan;
  plan.policy = policy;
  const int n = static_cast<int>(ranks.size());
  const auto byHost = ranksByHost(ranks);
  plan.hosts = static_cast<int>(byHost.size());

  int channels = 1;
  if (plan.hosts > 1) {
    int fewest = 1 << 30;
    for (const auto& local : byHost) {
      if (!local.empty()) fewest = std::min(fewest, ranks[static_cast<size_t>(local.front())].nicCount);
    }
    channels = std::clamp(fewest, 1, kMaxChannels);
  }
  for (int c = 0; c < channels; ++c) {
    Channel channel;
    channel.nic.assign(static_cast<size_t>(n), -1);
    for (const auto& local : byHost) {
      // One host: no crossing to place, so its ranks keep their NUMA/GPU order.
      for (int r : plan.hosts > 1 ? segment(local, ranks, c) : local) {
        channel.ring.push_back(r);
        const RankPlacement& p = ranks[static_cast<size_t>(r)];
        // The channel's own NIC where the host has one; else the rank's nearest.
        channel.nic[static_cast<size_t>(r)] = p.nicCount > c && channels > 1 ? c : p.preferredNic;
      }
    }
    plan.channels.push_back(std::move(channel));
  }

  // Trees: the double binary tree over hosts, each host's ranks chained below its first one in
  // tree 0 and below its last one, the other way, in tree 1. So the chain's ends swap parts: on
  // one host the root of one tree is the last leaf of the other, and each reduces its own half
  // (with one chain for both, rank 0 reduced the whole buffer while the others waited).
  for (int which = 0; which < 2; ++which) {
    const Tree hostTree = doubleBinaryTree(plan.hosts)[static_cast<size_t>(which)];
    Tree& t = plan.trees[static_cast<size_t>(which)];
    t.parent.assign(static_cast<size_t>(n), -1);
    t.children.assign(static_cast<size_t>(n), {});
    for (int h = 0; h < plan.hosts; ++h) {
      std::vector<int> chain = byHost[static_cast<size_t>(h)];
      if (chain.empty()) continue;
      if (which == 1) std::reverse(chain.begin(), chain.end());
      const int up = hostTree.parent[static_cast<size_t>(h)];
      if (up >= 0) {
        const auto& upper = byHost[static_cast<size_t>(up)];
        t.parent[static_cast<size_t>(chain.front())] = which == 0 ? upper.front() : upper.back();
      } else {
        t.root = chain.front();
      }
      for (size_t i = 1; i < chain.size(); ++i) t.parent[static_cast<size_t>(chain[i])] = chain[i - 1];
    }
    for (int r = 0; r < n; ++r) {
      if (t.parent[static_cast<size_t>(r)] >= 0) t.children[static_cast<size_t>(t.parent[static_cast<size_t>(r)])].push_back(r);
    }
  }

  return plan;
}

Transport transportBetween(const Plan& plan, const std::vector<RankPlacement>& ranks, int a, int b) {
  if (a == b) return Transport::Self;
  const RankPlacement& pa = ranks[static_cast<size_t>(a)];
  const RankPlacement& pb = ranks[static_cast<size_t>(b)];
  const bool shm = pa.host == pb.host && pa.sharedMemory && pb.sharedMemory;
  return shm && plan.policy != TransportPolicy::Socket ? Transport::Shm : Transport::Socket;
}

DeviceTransport deviceTransportBetween(const std::vector<RankPlacement>& ranks, int a, int b) {
  if (a == b) return DeviceTransport::Self;
  return ranks[static_cast<size_t>(a)].host == ranks[static_cast<size_t>(b)].host ? DeviceTransport::CudaIpc
                                                                                   : DeviceTransport::Staged;
}

namespace {

long long pairsAmong(long long k) { return k * (k - 1) / 2; }

// Pairs of ranks (Self left out), counted from the ranks per host: no loop over all pairs.
struct PairCounts {
  long long shm = 0, socket = 0;  // by host transport
  long long sameHost = 0, all = 0;
};

PairCounts countPairs(const Plan& plan, const std::vector<RankPlacement>& ranks) {
  std::vector<long long> onHost(static_cast<size_t>(plan.hosts), 0), sharedMemory(onHost);
  for (const RankPlacement& p : ranks) {
    onHost[static_cast<size_t>(p.host)]++;
    sharedMemory[static_cast<size_t>(p.host)] += p.sharedMemory ? 1 : 0;
  }
  PairCounts pairs;
  pairs.all = pairsAmong(static_cast<long long>(ranks.size()));
  for (size_t h = 0; h < onHost.size(); ++h) {
    pairs.sameHost += pairsAmong(onHost[h]);
    if (plan.policy != TransportPolicy::Socket) pairs.shm += pairsAmong(sharedMemory[h]);
  }
  pairs.socket = pairs.all - pairs.shm;
  return pairs;
}

}  // namespace

bool anySocketPair(const Plan& plan, const std::vector<RankPlacement>& ranks) {
  return countPairs(plan, ranks).socket > 0;
}

coll::RankOrder rankOrderOf(const Plan& plan) {
  coll::RankOrder order;
  if (!plan.channels.empty()) order.ring = plan.channels.front().ring;
  if (plan.channels.size() > 1) {
    for (const Channel& channel : plan.channels) order.channelRings.push_back(channel.ring);
  }
  for (size_t t = 0; t < plan.trees.size(); ++t) order.treeParent[t] = plan.trees[t].parent;
  return order;
}

coll::CommLayout commLayoutOf(const coll::RankOrder& order, const std::vector<RankPlacement>& ranks) {
  return coll::layoutOf(order, static_cast<int>(ranks.size()), ranksPerCpu(ranks), cacheBytesPerRank(ranks),
                        privateCacheBytesPerRank(ranks));
}

std::vector<std::pair<int, int>> channelNics(const Plan& plan, const std::vector<RankPlacement>& ranks, int a, int b) {
  std::vector<std::pair<int, int>> out;
  const auto n = static_cast<int>(ranks.size());
  if (plan.channels.size() < 2 || a < 0 || b < 0 || a >= n || b >= n ||
      ranks[static_cast<size_t>(a)].host == ranks[static_cast<size_t>(b)].host) {
    return out;
  }
  for (const Channel& ch : plan.channels) out.emplace_back(ch.nic[static_cast<size_t>(a)], ch.nic[static_cast<size_t>(b)]);
  return out;
}

std::string describePlan(const Plan& plan, const std::vector<RankPlacement>& ranks) {
  std::string out = formatString("%zu rank(s) on %d host(s), %zu channel(s)\n", ranks.size(), plan.hosts,
                                 plan.channels.size());
  for (size_t c = 0; c < plan.channels.size(); ++c) {
    const Channel& ch = plan.channels[c];
    out += formatString("  ring %zu:", c);
    for (size_t i = 0; i < ch.ring.size(); ++i) {
      const int r = ch.ring[i];
      const bool newHost = i > 0 && ranks[static_cast<size_t>(r)].host != ranks[static_cast<size_t>(ch.ring[i - 1])].host;
      out += formatString("%s %d", newHost ? " |" : "", r);
    }
    out += "\n    NIC by rank:";
    for (size_t r = 0; r < ch.nic.size(); ++r) out += formatString(" %zu:%d", r, ch.nic[r]);
    out += "\n";
  }
  for (size_t t = 0; t < plan.trees.size(); ++t) {
    const Tree& tree = plan.trees[t];
    out += formatString("  tree %zu (root %d):", t, tree.root);
    for (size_t r = 0; r < tree.children.size(); ++r) {
      if (tree.children[r].empty()) continue;
      out += formatString(" %zu->", r);
      for (size_t k = 0; k < tree.children[r].size(); ++k) out += formatString("%s%d", k ? "," : "", tree.children[r][k]);
    }
    out += "\n";
  }
  const PairCounts pairs = countPairs(plan, ranks);
  out += "  pairs by transport:";
  if (pairs.shm > 0) out += formatString(" %s %lld", transportName(Transport::Shm), pairs.shm);
  if (pairs.socket > 0) out += formatString(" %s %lld", transportName(Transport::Socket), pairs.socket);
  out += "\n";
  if (std::any_of(ranks.begin(), ranks.end(), [](const RankPlacement& p) { return p.gpu >= 0; })) {
    out += formatString("  device buffers: cuda-ipc %lld, staged %lld pairs\n", pairs.sameHost,
                        pairs.all - pairs.sameHost);
  }
  return out;
}

std::string planToDot(const Plan& plan, const std::vector<RankPlacement>& ranks) {
  static const char* kColors[] = {"red", "blue", "darkgreen", "orange", "purple", "brown", "cyan", "magenta"};
  std::string out = "digraph weft_plan {\n  rankdir=LR;\n  node [shape=box];\n";
  for (int h = 0; h < plan.hosts; ++h) {
    out += formatString("  subgraph cluster_host%d {\n    label=\"host %d\";\n", h, h);
    for (size_t r = 0; r < ranks.size(); ++r) {
      const RankPlacement& p = ranks[r];
      if (p.host != h) continue;
      out += formatString("    r%zu [label=\"rank %zu\\nNUMA %d GPU %d NIC %d\"];\n", r, r, p.numaNode, p.gpu, p.preferredNic);
    }
    out += "  }\n";
  }
  for (size_t c = 0; c < plan.channels.size(); ++c) {
    const auto& ring = plan.channels[c].ring;
    for (size_t i = 0; i < ring.size(); ++i) {
      out += formatString("  r%d -> r%d [color=%s, label=\"ch%zu\"];\n", ring[i], ring[(i + 1) % ring.size()],
                          kColors[c % 8], c);
    }
  }
  for (size_t t = 0; t < plan.trees.size(); ++t) {
    const Tree& tree = plan.trees[t];
    for (size_t r = 0; r < tree.parent.size(); ++r) {
      if (tree.parent[r] >= 0) {
        out += formatString("  r%d -> r%zu [style=dashed, color=gray%d, label=\"tree%zu\"];\n", tree.parent[r], r,
                            t == 0 ? 30 : 60, t);
      }
    }
  }
  return out + "}\n";
}

}  // namespace weft::plan
