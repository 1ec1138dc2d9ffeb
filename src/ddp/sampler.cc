#include <algorithm>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>

#include "weft/ddp.hpp"

namespace weft::ddp {

DistributedSampler::DistributedSampler(size_t datasetSize, int numReplicas, int rank, bool shuffle, uint64_t seed,
                                       bool dropLast)
    : size_(datasetSize), replicas_(numReplicas), rank_(rank), shuffle_(shuffle), dropLast_(dropLast), seed_(seed) {
  // As torch, which raises ValueError for these.
  if (numReplicas < 1) {
    throw std::invalid_argument("DistributedSampler: numReplicas " + std::to_string(numReplicas) + " is not positive");
  }
  if (rank < 0 || rank >= numReplicas) {
    throw std::invalid_argument("DistributedSampler: rank " + std::to_string(rank) + " is not in [0, " +
                                std::to_string(numReplicas - 1) + "]");
  }
  const auto r = static_cast<size_t>(numReplicas);
  // As torch: with drop_last and an uneven split, the tail is dropped; otherwise padded.
  numSamples_ = size_ / r + (!dropLast_ && size_ % r != 0 ? 1 : 0);  // (size_ + r - 1) / r would overflow
}

std::vector<size_t> DistributedSampler::indices() const {
  std::vector<size_t> order(size_);
  std::iota(order.begin(), order.end(), size_t{0});
  if (shuffle_) {
    // torch.randperm(size, generator seeded with seed + epoch), as torch's sampler draws it: the
    // generator is a 32-bit Mersenne twister seeded with the seed's low 32 bits, and randperm a
    // Fisher-Yates pass taking one 32-bit draw modulo what is left per position. So the C++ and
    // Python trainers see the same order, whatever the standard library's shuffle does.
    std::mt19937 rng(static_cast<uint32_t>(seed_ + epoch_));
    for (size_t i = 0; i + 1 < size_; ++i) std::swap(order[i], order[i + rng() % (size_ - i)]);
  }
  const size_t total = numSamples_ * static_cast<size_t>(replicas_);
  if (!dropLast_) {
    // Pad by repeating the start of the order (as often as needed for tiny datasets).
    for (size_t i = 0; order.size() < total && size_ > 0; ++i) order.push_back(order[i]);
  }
  order.resize(total);
  std::vector<size_t> mine;
  mine.reserve(numSamples_);
  for (size_t i = static_cast<size_t>(rank_); i < total; i += static_cast<size_t>(replicas_)) mine.push_back(order[i]);
  return mine;
}

}  // namespace weft::ddp
