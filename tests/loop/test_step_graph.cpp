// train.cuda_graphs' decision (Note [CUDA graphs]): which runs can have their steps captured, and the
// reason given for each that cannot. The capture itself needs a GPU: test_gpt_training's [gpu] case.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "ddp/loop/step_graph.h"
#include "ddp/optim/foreach_adamw.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp;

namespace {

StepGraphFacts capturable() {
  StepGraphFacts facts;
  facts.on_gpu = true;
  facts.libtorch_captures = true;
  facts.optimizer = "adamw";
  return facts;
}

std::string reason(const StepGraphFacts& facts) { return step_graph_blocker(facts).value_or("(none)"); }

}  // namespace

TEST_CASE("a step graph is refused, with its reason, for what a replay would get wrong", "[step_graph]") {
  CHECK_FALSE(step_graph_blocker(capturable()));
  auto facts = capturable();
  facts.on_gpu = false;
  CHECK(reason(facts) == "the model is on the CPU (a CUDA graph is a GPU's)");
  facts = capturable();
  facts.libtorch_captures = false;
  CHECK_THAT(reason(facts), Catch::StartsWith("this LibTorch cannot capture a step (it needs a CUDA build of LibTorch "
                                              "2.3 or later"));
  facts = capturable();
  facts.world_size = 2;
  CHECK(reason(facts) == "the step's collectives across 2 ranks are not captured yet (only a step at world 1 is)");
  facts = capturable();
  facts.shard = "parameters";
  CHECK(reason(facts) == "dist.shard: parameters gathers and frees state as the step goes, which a replay would not");
  facts = capturable();
  facts.row_updates = true;
  CHECK(reason(facts) == "embedding tables stepped by rows (optim.embeddings) choose their rows on the host");
  facts = capturable();
  facts.optimizer = "sgd";
  CHECK(reason(facts) == "optim.name: sgd keeps state on the host; only adamw's step is captured");
  facts = capturable();
  facts.task = "node_classification";
  CHECK(reason(facts) == "train.task: node_classification reads its sampled blocks' sizes on the host in each step");
  facts = capturable();
  facts.activation_checkpointing = "every_2";
  CHECK(reason(facts) == "model.activation_checkpointing: every_2 sets the CUDA generator's state to recompute "
                         "blocks, which a capture refuses");
  facts = capturable();
  facts.model = "torchscript";
  CHECK(reason(facts) == "model.name: torchscript's executor may still be compiling the module when the capture "
                         "comes");
  facts = capturable();
  facts.task = "classification";
  facts.model = "llama";
  CHECK_FALSE(step_graph_blocker(facts));  // llama, mlp, convnet...: plain modules, fixed batch shapes
  // The CPU comes first: on a CPU run the other reasons are beside the point.
  facts.on_gpu = false;
  CHECK(reason(facts) == "the model is on the CPU (a CUDA graph is a GPU's)");
}

TEST_CASE("this build's answer: Debian's LibTorch 1.13 CPU cannot capture, and says so where asked", "[step_graph]") {
  if (libtorch_captures_steps()) {
    WARN("skipped: this LibTorch can capture steps (a CUDA build of 2.3 or later): the [gpu] case covers it");
    return;
  }
  CHECK_THROWS_WITH(StepGraph(torch::Device(torch::kCUDA, 0)),
                    Catch::Contains("this LibTorch cannot capture a step"));
  torch::Tensor w = torch::ones({3}).requires_grad_();
  ForeachAdamW adamw({torch::optim::OptimizerParamGroup({w})}, torch::optim::AdamWOptions(0.1));
#if TORCH_VERSION_MAJOR < 2
  CHECK_THROWS_WITH(adamw.hold_lr_on_device(torch::kCPU), Catch::Contains("needs LibTorch 2.3 or later"));
#endif
}

TEST_CASE("ForeachAdamW::replayed advances the state's step counts as the step it repeats did", "[step_graph][optim]") {
  // After a replay of a captured step the device did the step; the host's counts, which checkpoints
  // hold, must say so too.
  torch::Tensor a = torch::ones({3}).requires_grad_(), b = torch::ones({2}).requires_grad_();
  ForeachAdamW adamw({torch::optim::OptimizerParamGroup({a, b})}, torch::optim::AdamWOptions(0.1), /*always=*/true);
  auto counts = [&] {
    std::vector<int64_t> out;
    for (const auto& [key, state] : adamw.state())
      out.push_back(static_cast<const torch::optim::AdamWParamState&>(*state).step());
    std::sort(out.begin(), out.end());
    return out;
  };
  a.mutable_grad() = torch::ones({3});
  adamw.step();  // b has no gradient: its count does not start
  adamw.note_captured();
  CHECK(counts() == std::vector<int64_t>{1});
  adamw.replayed();
  adamw.replayed();
  CHECK(counts() == std::vector<int64_t>{3});
  b.mutable_grad() = torch::ones({2});
  adamw.step();  // an eager step between replays (a short batch): the captured step's set stays the one replayed
  CHECK(counts() == std::vector<int64_t>{1, 4});
  adamw.replayed();
  CHECK(counts() == std::vector<int64_t>{1, 5});
  adamw.note_captured();  // a step that stepped both, captured
  adamw.replayed();
  CHECK(counts() == std::vector<int64_t>{2, 6});
}

}  // namespace DDP_TEST_FILE
