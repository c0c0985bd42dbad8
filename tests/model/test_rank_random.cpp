// Random draws per rank thread (rank_random.h): dropout with the bits of LibTorch's own, and rank
// threads that each draw what a process of their own would, however the threads interleave.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <thread>
#include <vector>

#include "ddp/model/rank_random.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

namespace {

// A build that draws from the default generator (as nn::init does), then a forward's dropout
// through cpu_generator(): what one rank does, returned as one tensor.
torch::Tensor build_then_drop(uint64_t seed) {
  torch::Tensor weights;
  ddp::build_seeded(seed, [&] { weights = torch::randn({64}); });
  auto x = torch::ones({4, 256});
  std::vector<torch::Tensor> parts{weights};
  for (int step = 0; step < 3; ++step) parts.push_back(ddp::rank_dropout(x, 0.25, true).flatten());
  return torch::cat(parts);
}

}  // namespace

TEST_CASE("rank_dropout gives torch::dropout's masks, values and gradients bit for bit", "[model][threads]") {
  auto x = torch::randn({8, 33}).requires_grad_();
  torch::manual_seed(7);
  auto theirs = torch::dropout(x, 0.3, true);
  theirs.sum().backward();
  auto their_grad = x.grad().clone();
  x.mutable_grad().zero_();
  torch::manual_seed(7);
  auto ours = ddp::rank_dropout(x, 0.3, true);
  ours.sum().backward();
  CHECK(torch::equal(ours, theirs));
  CHECK(torch::equal(x.grad(), their_grad));
  // And the generator is left where LibTorch's dropout leaves it: the next draws agree too.
  torch::manual_seed(7);
  (void)torch::dropout(x, 0.3, true);
  auto next_theirs = torch::rand({5});
  torch::manual_seed(7);
  (void)ddp::rank_dropout(x, 0.3, true);
  CHECK(torch::equal(torch::rand({5}), next_theirs));
  // Evaluation, p = 0 and p = 1 draw nothing.
  CHECK(torch::equal(ddp::rank_dropout(x, 0.3, false), x));
  CHECK(torch::equal(ddp::rank_dropout(x, 0.0, true), x));
  CHECK(ddp::rank_dropout(x, 1.0, true).abs().sum().item<double>() == 0);
}

TEST_CASE("rank threads each draw what a process of their own draws, however they interleave", "[model][threads]") {
  const torch::Tensor alone = build_then_drop(11);  // this thread: the default generator, as a process
  constexpr int kRanks = 4;
  std::vector<torch::Tensor> drawn(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r)
    threads.emplace_back([&, r] {
      ddp::RankGeneratorScope generator;
      for (int round = 0; round < 20; ++round) drawn[r] = build_then_drop(11);  // interleaving with the others
    });
  for (auto& thread : threads) thread.join();
  for (int r = 0; r < kRanks; ++r) {
    INFO("rank " << r);
    CHECK(torch::equal(drawn[r], alone));
  }
  // The check can fail: another seed draws otherwise.
  CHECK_FALSE(torch::equal(build_then_drop(12), alone));
}

}  // namespace DDP_TEST_FILE
