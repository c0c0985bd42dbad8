// The pipeline runner in-process (Note [Pipeline schedules]): two stages as threads over Gloo run a
// three-layer network's microbatches under GPipe and 1F1B, against one process that runs the whole
// network on the whole batch; a stage whose neighbour never sends fails, naming it; and one whose
// output shape changes for inputs of the same shape stops, saying so (Note [Shapes between stages]).
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <chrono>
#include <vector>

#include "ddp/loop/pipeline_runner.h"
#include "support/three_layers.h"
#include "support/thread_ranks.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using Catch::Contains;

namespace {

constexpr int kMicrobatches = 4;
constexpr int kSteps = 4;
constexpr int64_t kMicrobatch = 3;  // samples

using ddp::test::make_three_layer_parameters;  // three units of (weight, bias)

ddp::ModelBlock layer(const std::vector<torch::Tensor>& p, std::size_t index) {
  torch::Tensor weight = p[2 * index], bias = p[2 * index + 1];
  return {"layer" + std::to_string(index),
          {weight, bias},
          {},
          [weight, bias, index](torch::Tensor x) {
            x = torch::nn::functional::linear(x, weight, bias);
            return index < 2 ? torch::tanh(x) : x;
          }};
}

// From the second step on, the last microbatch is a sample short: a shape the stages learn then,
// with a header, and send without one the step after (Note [Shapes between stages]).
ddp::Batch microbatch(int step, int m) {
  const int64_t samples = step > 0 && m == kMicrobatches - 1 ? kMicrobatch - 1 : kMicrobatch;
  ddp::Batch batch;
  auto at = torch::arange(samples * 8, torch::kFloat).reshape({samples, 8});
  batch.inputs = {torch::cos(at * 0.13 + m * 1.7 + step * 0.5)};
  batch.targets = torch::sin(torch::arange(samples * 4, torch::kFloat).reshape({samples, 4}) * 0.29 + m - step);
  return batch;
}

// The last stage's loss: the mean squared error of its output.
class MseTask final : public ddp::Task {
 public:
  torch::nn::Module& model() override { return module_; }
  int64_t size(ddp::Split) const override { return 0; }
  ddp::Batch make_batch(ddp::Split, const torch::Tensor&) const override { return {}; }
  torch::Tensor loss(const ddp::Batch&) override { throw std::logic_error("runs as stages only"); }
  torch::Tensor output_loss(const torch::Tensor& output, const ddp::Batch& batch) override {
    return torch::mse_loss(output, batch.targets);
  }
  torch::Tensor output_metric_sums(const torch::Tensor& output, const ddp::Batch& batch) override {
    return torch::mse_loss(output, batch.targets, torch::Reduction::Sum).to(torch::kDouble).reshape({1});
  }
  std::vector<std::string> metric_names() const override { return {"loss"}; }
  torch::Tensor metric_sums(const ddp::Batch&) override { throw std::logic_error("runs as stages only"); }
  void save_model(const std::string&) const override {}

 private:
  torch::nn::Module module_;
};

torch::optim::SGDOptions sgd() { return torch::optim::SGDOptions(0.2).momentum(0.9); }

struct Reference {
  std::vector<torch::Tensor> parameters;
  std::vector<double> losses;  // each step's microbatch losses times their samples, summed
};

// One process: each step's loss is the mean over its samples, each microbatch's mean counting as
// its share of them (Note [Micro-batches of unequal size]: the last is a sample short).
Reference reference() {
  Reference out{make_three_layer_parameters(), {}};
  torch::optim::SGD optimizer(out.parameters, sgd());
  for (int step = 0; step < kSteps; ++step) {
    optimizer.zero_grad();
    torch::Tensor total = torch::zeros({});
    double sum = 0;
    int64_t step_samples = 0;
    for (int m = 0; m < kMicrobatches; ++m) step_samples += microbatch(step, m).size();
    for (int m = 0; m < kMicrobatches; ++m) {
      auto batch = microbatch(step, m);
      torch::Tensor x = batch.inputs[0];
      for (std::size_t l = 0; l < 3; ++l) x = layer(out.parameters, l).forward(x);
      auto loss = torch::mse_loss(x, batch.targets);
      sum += loss.item<double>() * static_cast<double>(batch.size());  // its samples' losses: the runner's loss_sum
      total = total + loss * static_cast<double>(batch.size()) / static_cast<double>(step_samples);
    }
    total.backward();
    optimizer.step();
    out.losses.push_back(sum);
  }
  return out;
}

}  // namespace

TEST_CASE("pipeline stages in-process: two stages under GPipe and 1F1B train to one process's weights and losses",
          "[pipeline]") {
  const Reference expected = reference();
  for (std::string schedule : {"gpipe", "1f1b"}) {
    DYNAMIC_SECTION(schedule) {
      std::vector<std::vector<torch::Tensor>> trained(2);
      std::vector<double> losses;
      std::vector<int> before_last_backward(2, 0), actions(2, 0), losses_elsewhere(2, 0);
      auto errors = ddp::test::run_ranks(2, [&](int stage, const ddp::Communicator& pipeline) {
        auto parameters = make_three_layer_parameters();
        // Stage 0 runs layers 0 and 1, stage 1 layer 2 and the loss.
        std::vector<ddp::ModelBlock> layers;
        for (std::size_t l : stage == 0 ? std::vector<std::size_t>{0, 1} : std::vector<std::size_t>{2})
          layers.push_back(layer(parameters, l));
        std::vector<torch::Tensor> mine;
        for (const auto& l : layers) mine.insert(mine.end(), l.parameters.begin(), l.parameters.end());
        MseTask task;
        ddp::PipelineRunner runner(std::move(layers), task, pipeline, schedule, std::chrono::seconds(20), false);
        torch::optim::SGD optimizer(mine, sgd());
        for (int step = 0; step < kSteps; ++step) {
          std::vector<ddp::Batch> batches;
          for (int m = 0; m < kMicrobatches; ++m) batches.push_back(microbatch(step, m));
          optimizer.zero_grad();
          torch::Tensor loss = runner.train(
              batches, [&] { ++before_last_backward[stage]; }, [&](int) { ++actions[stage]; });
          optimizer.step();
          if (runner.last()) losses.push_back(loss.item<double>());
          else losses_elsewhere[stage] += loss.defined();  // (Catch's checks are for the main thread)
        }
        trained[stage] = mine;
      });
      for (int s = 0; s < 2; ++s) {
        INFO("stage " << s);
        CHECK(errors[s] == "");
        CHECK(before_last_backward[s] == kSteps);                  // once a step, for the gradient sync
        CHECK(actions[s] == kSteps * kMicrobatches * 2);           // a forward and a backward each
        CHECK(losses_elsewhere[s] == 0);                           // only the last stage has the loss
      }
      REQUIRE(trained[0].size() == 4);
      REQUIRE(trained[1].size() == 2);
      std::vector<torch::Tensor> all = trained[0];
      all.insert(all.end(), trained[1].begin(), trained[1].end());
      for (std::size_t i = 0; i < all.size(); ++i) {
        INFO("parameter " << i << ": largest difference " << (all[i] - expected.parameters[i]).abs().max().item<double>());
        CHECK(torch::allclose(all[i], expected.parameters[i], 1e-5, 1e-6));
      }
      REQUIRE(losses.size() == expected.losses.size());
      for (std::size_t s = 0; s < losses.size(); ++s) CHECK(losses[s] == Approx(expected.losses[s]).epsilon(1e-6));
    }
  }
}

TEST_CASE("a pipeline stage whose neighbour never sends fails after the time-out, naming the stage and microbatch",
          "[pipeline]") {
  auto errors = ddp::test::run_ranks(2, [&](int stage, const ddp::Communicator& pipeline) {
    if (stage == 0) return;  // never runs its part
    auto parameters = make_three_layer_parameters();
    MseTask task;
    ddp::PipelineRunner runner({layer(parameters, 2)}, task, pipeline, "gpipe", std::chrono::seconds(1), false);
    runner.train({microbatch(0, 0)}, [] {}, [](int) {});
  });
  CHECK(errors[0] == "");
  CHECK_THAT(errors[1], Contains("pipeline stage 1 waited for the activations of microbatch 0 from stage 0 "
                                 "(dist.timeout_s 1): "));
}

TEST_CASE("a pipeline stage whose output shape changes for inputs of the same shape stops, naming both shapes",
          "[pipeline]") {
  auto errors = ddp::test::run_ranks(2, [&](int stage, const ddp::Communicator& pipeline) {
    auto parameters = make_three_layer_parameters();
    std::vector<ddp::ModelBlock> layers;
    int forwards = 0;
    if (stage == 0) {
      layers.push_back(layer(parameters, 0));
      // A width that follows how many forwards ran, not the input's shape.
      layers.push_back({"cut", {}, {}, [&forwards](torch::Tensor x) { return x.narrow(1, 0, ++forwards > 1 ? 12 : 16); }});
    } else {
      layers.push_back(layer(parameters, 2));
    }
    MseTask task;
    // Long enough for a starved thread's first step, which must pass.
    ddp::PipelineRunner runner(std::move(layers), task, pipeline, "gpipe", std::chrono::seconds(3), false);
    for (int step = 0; step < 2; ++step) runner.train({microbatch(0, 0)}, [] {}, [](int) {});
  });
  CHECK_THAT(errors[0], Contains("pipeline stage 0: microbatch 0's activations are [3, 12] of Float, where earlier "
                                 "ones, for inputs of shape [3, 8], were [3, 16] of Float: a stage's output shape "
                                 "must follow its input's shape"));
  CHECK_THAT(errors[1], Contains("pipeline stage 1 waited for the activations of microbatch 0 from stage 0"));
}

TEST_CASE("pipeline evaluation in-process: two stages give one process's metric sums over batches whose last is "
          "short, and a stage whose eval output shape changes for inputs of the same shape stops, naming both",
          "[pipeline]") {
  const auto parameters = make_three_layer_parameters();
  std::vector<double> expected;
  for (int b = 0; b < 4; ++b) {
    auto batch = microbatch(b == 3 ? 1 : 0, b == 3 ? kMicrobatches - 1 : b);  // the last a sample short
    torch::NoGradGuard no_grad;
    torch::Tensor x = batch.inputs[0];
    for (std::size_t l = 0; l < 3; ++l) x = layer(parameters, l).forward(x);
    expected.push_back(torch::mse_loss(x, batch.targets, torch::Reduction::Sum).item<double>());
  }
  for (const bool changing : {false, true}) {
    std::vector<double> sums;
    auto errors = ddp::test::run_ranks(2, [&](int stage, const ddp::Communicator& pipeline) {
      std::vector<ddp::ModelBlock> layers;
      int forwards = 0;
      if (stage == 0) {
        layers = {layer(parameters, 0), layer(parameters, 1)};
        // Past the first batch, a width that follows how many forwards ran, not the input's shape.
        if (changing)
          layers.push_back({"pad", {}, {}, [&forwards](torch::Tensor x) {
                              return ++forwards > 1 ? torch::cat({x, x.narrow(1, 0, 1)}, 1) : x;
                            }});
      } else {
        layers = {layer(parameters, 2)};
      }
      MseTask task;
      // Every batch passes unless the shape changes: a starved thread then has time.
      ddp::PipelineRunner runner(std::move(layers), task, pipeline, "gpipe", std::chrono::seconds(changing ? 3 : 20),
                                 false);
      torch::NoGradGuard no_grad;
      for (int b = 0; b < 4; ++b) {
        auto out = runner.evaluate(microbatch(b == 3 ? 1 : 0, b == 3 ? kMicrobatches - 1 : b));
        if (stage == 1) sums.push_back(out.item<double>());
      }
    });
    INFO("changing " << changing);
    if (!changing) {
      REQUIRE(errors[0].empty());
      REQUIRE(errors[1].empty());
      REQUIRE(sums.size() == expected.size());
      for (std::size_t b = 0; b < sums.size(); ++b) CHECK(sums[b] == Approx(expected[b]).epsilon(1e-6));
    } else {
      CHECK_THAT(errors[0], Contains("pipeline stage 0: microbatch 0's activations are [3, 17] of Float, where "
                                     "earlier ones, for inputs of shape [3, 8], were [3, 16] of Float"));
      CHECK_THAT(errors[1], Contains("pipeline stage 1 waited for the activations of microbatch 0 from stage 0"));
    }
  }
}

}  // namespace DDP_TEST_FILE
