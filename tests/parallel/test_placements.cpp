// Placements (Note [Placements]) in-process: four ranks as threads lay out three parameters over
// two pipeline stages, one weight tied across them, with each sharding; what every rank holds,
// counts and saves, and the gradients after the sync and clipping, against one whole model's.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <mutex>
#include <vector>

#include "ddp/common/value_slots.h"
#include "ddp/parallel/parallel_plan.h"
#include "support/subprocess.h"
#include "support/thread_ranks.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

namespace {

// a (stage 0), tied (stages 0 and 1, as the GPT's embedding and head), b (stage 1).
const std::vector<std::vector<int64_t>> kShapes{{5, 3}, {4, 2}, {7}};
const std::vector<std::vector<int>> kStagesOf{{0}, {0, 1}, {1}};
constexpr double kMaxNorm = 0.5;

// The gradient stage `stage` computes for parameter i: alike on every replica and shard.
torch::Tensor stage_gradient(std::size_t i, int stage) {
  int64_t numel = 1;
  for (int64_t d : kShapes[i]) numel *= d;
  return torch::cos(torch::arange(numel, torch::kFloat) * 0.9 + static_cast<double>(3 * i + stage)).reshape(kShapes[i]);
}

// One whole model's clipped gradients, flattened: the tied weight's the sum of both stages'.
std::vector<torch::Tensor> expected_gradients() {
  std::vector<torch::Tensor> grads;
  double squares = 0;
  for (std::size_t i = 0; i < kShapes.size(); ++i) {
    auto grad = torch::zeros(kShapes[i]);
    for (int stage : kStagesOf[i]) grad += stage_gradient(i, stage);
    squares += grad.to(torch::kDouble).pow(2).sum().item<double>();
    grads.push_back(grad.reshape(-1));
  }
  double coefficient = std::min(1.0, kMaxNorm / (std::sqrt(squares) + 1e-6));
  for (auto& grad : grads) grad.mul_(coefficient);
  return grads;
}

}  // namespace

TEST_CASE("placements over 2 stages of four ranks, a weight tied across them: every element saved once, the tied "
          "weight's gradient summed over its copies, and clipping to the whole model's norm",
          "[parallel][dist]") {
  for (std::string shard : {"none", "optimizer", "gradients"}) {
    DYNAMIC_SECTION("dist.shard " << shard) {
      ddp::MeshConfig mesh;
      mesh.pipeline = 2;
      mesh.shard = shard;
      mesh.data_shard = shard == "none" ? 1 : 2;  // the other 2 ranks of a stage replicate
      const auto expected = expected_gradients();
      std::vector<std::vector<int>> saves(kShapes.size());  // element → how many writers save it
      for (std::size_t i = 0; i < kShapes.size(); ++i) saves[i].assign(static_cast<std::size_t>(expected[i].numel()), 0);
      std::vector<double> side_sums(4, -1);
      std::vector<int> wrong_gradients(4, -1);
      std::mutex counting;

      auto errors = ddp::test::run_ranks(4, [&](int rank, const ddp::Communicator& world) {
        ddp::ParallelPlan plan(world, mesh, ddp::DistConfig{});
        torch::nn::Module model;
        std::vector<torch::Tensor> registered;
        for (std::size_t i = 0; i < kShapes.size(); ++i)
          registered.push_back(model.register_parameter("p" + std::to_string(i), torch::zeros(kShapes[i])));
        auto parameters = plan.prepare_model(model);
        std::vector<std::vector<torch::Tensor>> used(2), buffers(2);
        for (std::size_t i = 0; i < kShapes.size(); ++i)
          for (int stage : kStagesOf[i]) used[static_cast<std::size_t>(stage)].push_back(parameters[i]);
        plan.split_stages(parameters, used, buffers);
        ddp::ValueSlots side_values;
        auto vote = side_values.reserve("vote");
        side_values.value(vote) = rank + 1;
        auto sync = plan.make_gradient_sync(parameters, &side_values);
        plan.optimizer_parameters(parameters);

        // A backward through this stage's parameters: each gets its stage_gradient.
        const int stage = plan.stage();
        sync->prepare();
        auto loss = torch::zeros({});
        for (std::size_t i = 0; i < kShapes.size(); ++i)
          for (int s : kStagesOf[i])
            if (s == stage) loss = loss + (parameters[i] * stage_gradient(i, stage)).sum();
        loss.backward();
        sync->finish();
        plan.finish_gradients(side_values);
        plan.clip_grad_norm(kMaxNorm);
        side_sums[static_cast<std::size_t>(rank)] = side_values.value(vote);

        int wrong = 0;
        for (const auto& piece : plan.placements().held) {
          const auto& range = piece.range;
          auto want = expected[range.parameter].narrow(0, range.begin, range.value.numel());
          wrong += !torch::allclose(range.stepped.grad().reshape(-1), want, 1e-5, 1e-7);
          bool first_copy = kStagesOf[range.parameter].front() == stage;
          wrong += piece.counted != first_copy;
          wrong += (piece.copies != nullptr) != (kStagesOf[range.parameter].size() > 1);
        }
        wrong_gradients[static_cast<std::size_t>(rank)] = wrong;
        if (!plan.writes_shard()) return;
        std::lock_guard<std::mutex> lock(counting);
        for (const auto& range : plan.owned_ranges())
          for (int64_t k = 0; k < range.value.numel(); ++k)
            saves[range.parameter][static_cast<std::size_t>(range.begin + k)] += 1;
      });
      for (const auto& error : errors) CHECK(error.empty());
      CHECK(side_sums == std::vector<double>(4, 1 + 2 + 3 + 4));  // summed over the world after the stages' syncs
      CHECK(wrong_gradients == std::vector<int>(4, 0));
      for (std::size_t i = 0; i < kShapes.size(); ++i) {
        INFO("parameter " << i);
        CHECK(saves[i] == std::vector<int>(saves[i].size(), 1));
      }
    }
  }
}

}  // namespace DDP_TEST_FILE
