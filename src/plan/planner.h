// The planner: from every rank's placement (placement.h), the rings (one per channel), the
// double binary trees, each rank's NIC per channel and the transport of every pair. A pure
// function of its inputs, so every rank computes the same plan.
//
// Rings keep each host's ranks contiguous, so a ring crosses between hosts exactly once per
// host; within a host ranks go by NUMA node, then GPU (PCI order), then rank. With several
// hosts there is one channel per NIC (the fewest any host has, at most kMaxChannels), and in
// channel c each host's segment is rotated (and turned round where that serves) to leave and
// enter the host through the ranks closest to NIC c. Trees are NCCL's double binary trees over
// the hosts (each host interior in at most one of the two), with a chain through the ranks of
// each host below its first rank.
#pragma once

#include <array>
#include <string>
#include <utility>
#include <vector>

#include "coll/cost_model.h"
#include "coll/rank_order.h"
#include "plan/placement.h"

namespace weft::plan {

enum class Transport : uint8_t { Self, Shm, Socket };
const char* transportName(Transport transport);

// How device buffers move between a pair: GPU to GPU through CUDA/HIP IPC (ranks of one host),
// or staged through pinned host memory over the host transport.
enum class DeviceTransport : uint8_t { Self, CudaIpc, Staged };

// What WEFT_TRANSPORT asks for: the planner's choice, sockets everywhere, or shared memory
// between ranks of one host.
enum class TransportPolicy : uint8_t { Auto, Socket, Shm };

struct Tree {
  int root = -1;
  std::vector<int> parent;                 // by rank; -1 at the root
  std::vector<std::vector<int>> children;  // by rank
};

// More fabric NICs than this add no channels: each channel past the last rail would multiply the
// sockets per pair without a NIC of its own. Eight: a rail per GPU on the 8-GPU servers whose
// GPUs each have a NIC (a DGX H100's eight ConnectX-7).
constexpr int kMaxChannels = 8;

struct Channel {
  std::vector<int> ring;  // every rank once, in ring order
  std::vector<int> nic;   // by rank: the NIC of its host this channel uses (-1: none)
};

struct Plan {
  int hosts = 0;
  TransportPolicy policy = TransportPolicy::Auto;
  std::vector<Channel> channels;
  std::array<Tree, 2> trees;
};

Plan makePlan(const std::vector<RankPlacement>& ranks, TransportPolicy policy = TransportPolicy::Auto);

// The transport of each pair, worked out when asked rather than kept in an n x n table (a
// million ranks would need a terabyte): shared memory between ranks of one host that both allow
// it (unless the policy says sockets), sockets otherwise.
Transport transportBetween(const Plan& plan, const std::vector<RankPlacement>& ranks, int a, int b);
DeviceTransport deviceTransportBetween(const std::vector<RankPlacement>& ranks, int a, int b);
// Whether any pair's transport is a socket.
bool anySocketPair(const Plan& plan, const std::vector<RankPlacement>& ranks);

// What the collective algorithms follow: the first channel's ring (every channel's, for the
// ring all-reduce) and the two trees.
coll::RankOrder rankOrderOf(const Plan& plan);

// What the cost model knows of `ranks` following `order` (rankOrderOf): their number, the trees'
// shape, the most crowded host's ranks per CPU and the least cache shares, as every rank and
// weft-topo --predict take it (arenaBytes is the caller's to set).
coll::CommLayout commLayoutOf(const coll::RankOrder& order, const std::vector<RankPlacement>& ranks);

// The NICs that ranks a and b use in each channel, as (a's, b's), for a pair on different hosts
// in a plan with several channels; empty otherwise. The pair's socket streams are spread over
// these rails (core/rails.h), so striped messages cross every channel's NIC.
std::vector<std::pair<int, int>> channelNics(const Plan& plan, const std::vector<RankPlacement>& ranks, int a, int b);

// The binary tree NCCL uses over n nodes (parent and up to two children of each; odd nodes are
// leaves), and a pair of such trees in which every node is interior in at most one.
Tree binaryTree(int n);
std::array<Tree, 2> doubleBinaryTree(int n);

// Human-readable: rings with host boundaries, trees, NICs and transports (weft-topo, INFO logs).
std::string describePlan(const Plan& plan, const std::vector<RankPlacement>& ranks);
// Graphviz: a cluster per host, ring edges per channel, tree edges dashed.
std::string planToDot(const Plan& plan, const std::vector<RankPlacement>& ranks);

}  // namespace weft::plan
