// The libtorch adapter (weft/ddp_torch.hpp) on real ranks: rank 0's buffers reach every rank,
// bool buffers (masks) included, a tied weight is one parameter, and a buffer broadcast could
// not write correctly (strided) is refused before any rank sends.
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

// One weight in two places, as an embedding tied to the output layer: parameters() lists it twice.
struct TiedNet : torch::nn::Module {
  explicit TiedNet(int rank) {
    weight = register_parameter("weight", torch::full({4}, static_cast<float>(rank + 1)));
    register_parameter("tied", weight);
  }
  torch::Tensor forward(const torch::Tensor& x) { return (x * weight).sum() + (x * weight * weight).sum(); }
  torch::Tensor weight;
};

struct TwoWeights : torch::nn::Module {
  TwoWeights() {
    a = register_parameter("a", torch::ones({4}));
    b = register_parameter("b", torch::ones({4}));
    never = register_parameter("never", torch::ones({2}));
  }
  torch::Tensor a, b, never;
};

struct StridedNet : torch::nn::Module {
  StridedNet() {
    weight = register_parameter("weight", torch::ones({4}));
    column = register_buffer("column", torch::zeros({4, 4}).select(1, 0));  // stride 4
  }
  torch::Tensor weight, column;
};

}  // namespace

TEST_CASE("ddp torch: rank 0's parameters and bool buffers reach every rank, tied weights count once, strided buffers are refused", "[ddp][multiprocess]") {
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
    {
      // Its broadcast and its bucket hold the weight once, and its gradient is averaged once.
      TiedNet tied(ctx.rank);
      weft::ddp::TorchDDP ddp(comm, tied);
      RANK_CHECK(ctx, tied.weight.eq(1.0f).all().item<bool>(), "tied weight %g, expected rank 0's 1",
                 tied.weight[0].item<float>());
      tied.forward(torch::full({4}, static_cast<float>(ctx.rank + 1))).backward();
      ddp.finish();
      // d/dw of x*w + x*w^2 at w = 1 is 3x: x = 1 and 2 on the two ranks, so 3 and 6, averaged 4.5.
      RANK_CHECK(ctx, tied.weight.grad().eq(4.5f).all().item<bool>(), "gradient %g, expected 4.5",
                 tied.weight.grad()[0].item<float>());
    }
    {
      // Two backward passes without zero_grad between them: as torch's DDP, the accumulated
      // .grad() is averaged, 1.5 after the first (gradients 1 and 2) and 1.5 + 1.5 after the second.
      MaskedNet net(ctx.rank);
      weft::ddp::TorchDDP ddp(comm, net);  // weights 1 everywhere
      for (float want : {1.5f, 3.0f}) {
        (net.weight * static_cast<float>(ctx.rank + 1)).sum().backward();
        ddp.finish();
        RANK_CHECK(ctx, net.weight.grad().eq(want).all().item<bool>(), "accumulated gradient %g, expected %g",
                   net.weight.grad()[0].item<float>(), want);
      }
    }
    {
      // Gradients accumulate (no zero_grad). Step 0: both ranks use b (gradients 1 and 2): .grad
      // 1.5. Step 1: only rank 0 does (1.5 + 1); rank 1 adds the 1.5 it holds: (2.5 + 1.5) / 2 = 2,
      // as torch's DDP with find_unused_parameters. Step 2: nobody does: .grad stays 2. A
      // parameter that never had a gradient keeps none.
      TwoWeights net;
      weft::ddp::TorchDDP ddp(comm, net);
      auto step = [&](bool useB) {
        torch::Tensor loss = net.a.sum();
        if (useB) loss = loss + (net.b * static_cast<float>(ctx.rank + 1)).sum();
        loss.backward();
        ddp.finish();
      };
      step(true);
      RANK_CHECK(ctx, net.b.grad().eq(1.5f).all().item<bool>(), "step 0: b's gradient %g", net.b.grad()[0].item<float>());
      step(ctx.rank == 0);
      RANK_CHECK(ctx, net.b.grad().eq(2.0f).all().item<bool>(), "step 1: b's gradient %g, expected 2",
                 net.b.grad()[0].item<float>());
      step(false);
      RANK_CHECK(ctx, net.b.grad().eq(2.0f).all().item<bool>(), "step 2: unused b's gradient %g, expected 2",
                 net.b.grad()[0].item<float>());
      RANK_CHECK(ctx, net.a.grad().eq(3.0f).all().item<bool>(), "a's gradient %g", net.a.grad()[0].item<float>());
      RANK_CHECK(ctx, !net.never.grad().defined(), "a parameter no rank used got a gradient");
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
