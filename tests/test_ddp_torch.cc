// The libtorch adapter (weft/ddp_torch.hpp) on real ranks: rank 0's buffers reach every rank,
// bool buffers (masks) included, and a buffer broadcast could not write correctly (strided) is
// refused before any rank sends.
#include <catch2/catch.hpp>

#include <stdexcept>

#include "multiprocess.h"
#include "weft/ddp_torch.hpp"

using namespace weft::test;

namespace {

struct MaskedNet : torch::nn::Module {
  explicit MaskedNet(int rank) {
    weight = register_parameter("weight", torch::full({4}, static_cast<float>(rank + 1)));
    mask = register_buffer("mask", torch::full({3}, rank == 0, torch::kBool));
  }
  torch::Tensor weight, mask;
};

struct StridedNet : torch::nn::Module {
  StridedNet() {
    weight = register_parameter("weight", torch::ones({4}));
    column = register_buffer("column", torch::zeros({4, 4}).select(1, 0));  // stride 4
  }
  torch::Tensor weight, column;
};

}  // namespace

TEST_CASE("ddp torch: rank 0's parameters and bool buffers reach every rank, strided buffers are refused", "[ddp][multiprocess]") {
  auto outcomes = runRanks(2, [](RankContext& ctx) {
    weftComm_t comm = nullptr;
    RANK_WEFT(ctx, weftCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
    if (comm == nullptr) return 1;
    {
      MaskedNet net(ctx.rank);
      weft::ddp::TorchDDP ddp(comm, net);
      RANK_CHECK(ctx, net.weight.eq(1.0f).all().item<bool>(), "weight %g, expected rank 0's 1",
                 net.weight[0].item<float>());
      RANK_CHECK(ctx, net.mask.all().item<bool>(), "the bool mask is not rank 0's (all true)");
    }
    StridedNet strided;
    bool refused = false;
    try {
      weft::ddp::TorchDDP ddp(comm, strided);
    } catch (const std::invalid_argument&) {
      refused = true;
    }
    RANK_CHECK(ctx, refused, "a strided buffer was taken");
    RANK_WEFT(ctx, weftCommDestroy(comm));
    return 0;
  });
  INFO(describeFailures(outcomes));
  // REQUIRE: torch's headers bring glog's CHECK, which would replace Catch's.
  for (const auto& o : outcomes) REQUIRE(o.exitCode == 0);
}
