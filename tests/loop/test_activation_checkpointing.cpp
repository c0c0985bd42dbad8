// Activation checkpointing in-process (Note [Activation checkpointing]): an 8-layer Llama's and a
// GPT's gradients with every block, or every second, recomputed in backward equal the plain run's
// (with dropout and under bf16 autocast too), and the peak of memory allocated for a step, counted by
// an allocator installed for the test, falls to at most 0.6× (printed). Composition with sharding and
// pipeline stages runs in real processes: tests/loop/test_gpt_training.cpp.
#include <torch/torch.h>
#include <catch2/catch.hpp>
#include <c10/core/CPUAllocator.h>
#include <torch/version.h>

#include <atomic>
#include <cstdio>
#include <map>

#include "ddp/common/error.h"
#include "ddp/loop/activation_checkpointing.h"
#include "ddp/loop/autocast_scope.h"
#include "ddp/loop/train_config.h"
#include "support/python_fixtures.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using Catch::Contains;

namespace {

// Every CPU allocation while installed, to know the peak a step reaches: LibTorch 1.13 keeps no
// statistics of its CPU allocator. It forwards to the allocator it replaced.
class CountingAllocator final : public c10::Allocator {
 public:
  // SetCPUAllocator takes an allocator of a priority at least the current one's.
  CountingAllocator() : inner_(c10::GetCPUAllocator()) { c10::SetCPUAllocator(this, next_priority_++); }
  ~CountingAllocator() override { c10::SetCPUAllocator(inner_, next_priority_++); }

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  c10::DataPtr allocate(size_t bytes) override { return wrap(bytes); }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
#else
  c10::DataPtr allocate(size_t bytes) const override { return wrap(bytes); }
#endif

  /// Bytes allocated now, and the most since reset_peak().
  static int64_t current() { return current_; }
  static int64_t peak() { return peak_; }
  static void reset_peak() { peak_ = current_.load(); }

 private:
  struct Held {
    c10::DataPtr inner;
    int64_t bytes;
  };

  c10::DataPtr wrap(size_t bytes) const {
    auto* held = new Held{inner_->allocate(bytes), static_cast<int64_t>(bytes)};
    int64_t now = current_ += held->bytes;
    for (int64_t was = peak_; now > was && !peak_.compare_exchange_weak(was, now);) {
    }
    void* data = held->inner.get();
    return {data, held, &release, c10::Device(c10::DeviceType::CPU)};
  }

  static void release(void* context) {
    auto* held = static_cast<Held*>(context);
    current_ -= held->bytes;
    delete held;
  }

  c10::Allocator* inner_;
  static inline std::atomic<int64_t> current_{0}, peak_{0};
  static inline uint8_t next_priority_ = 100;
};

ddp::ModelConfig llama(int64_t layers) {
  ddp::ModelConfig config;
  config.name = "llama";
  config.block_size = 128;
  config.llama.n_layer = layers;
  config.llama.n_head = 4;
  config.llama.n_kv_heads = 2;
  config.llama.dim = 64;
  config.llama.multiple_of = 32;
  config.llama.vocab_size = 256;
  return config;
}

torch::Tensor batch_of(int64_t rows, int64_t length) {
  return torch::arange(rows * (length + 1), torch::kLong).reshape({rows, length + 1}).mul(37).remainder(256);
}

// One step's gradients, by name, after the mean cross-entropy of next-token prediction.
std::map<std::string, torch::Tensor> gradients(ddp::Model& model, const torch::Tensor& rows, bool bf16 = false) {
  model.zero_grad();
  torch::manual_seed(11);  // dropout's draws: the same in every run
  torch::Tensor logits;
  {
    ddp::AutocastScope autocast(torch::kCPU, bf16);
    logits = model.forward(rows.narrow(1, 0, rows.size(1) - 1));
  }
  torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}).to(torch::kFloat),
                                       rows.narrow(1, 1, rows.size(1) - 1).reshape({-1}))
      .backward();
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : model.named_parameters()) out.emplace(item.key(), item.value().grad().clone());
  return out;
}

double largest_difference(const std::map<std::string, torch::Tensor>& a, const std::map<std::string, torch::Tensor>& b) {
  double worst = 0;
  for (const auto& [name, grad] : a) worst = std::max(worst, (grad - b.at(name)).abs().max().item<double>());
  return worst;
}

}  // namespace

TEST_CASE("activation checkpointing: an 8-layer Llama's and a dropout GPT's gradients equal the plain run's within "
          "1e-6, full and every_2, in float32 and under bf16 autocast",
          "[activation_checkpointing]") {
  auto rows = batch_of(4, 64);
  for (bool bf16 : {false, true}) {
    for (const std::string mode : {"full", "every_2"}) {
      INFO((bf16 ? "bf16 " : "fp32 ") << mode);
      torch::manual_seed(5);
      auto plain = ddp::make_model(llama(8));
      torch::manual_seed(5);
      auto checkpointed = ddp::make_model(llama(8));
      ddp::checkpoint_activations(*checkpointed, mode);
      auto expected = gradients(*plain, rows, bf16);
      auto got = gradients(*checkpointed, rows, bf16);
      REQUIRE(got.size() == expected.size());
      CHECK(got.at("model.embed_tokens.weight").abs().sum().item<double>() > 0);  // its block's input needs no grad
      CHECK(largest_difference(expected, got) < 1e-6);
    }
  }
  // Dropout draws again in the recomputation: the same draws, from the generator's saved state.
  ddp::ModelConfig gpt;
  gpt.name = "gpt";
  gpt.block_size = 64;
  gpt.gpt = {.n_layer = 3, .n_head = 2, .n_embd = 32, .vocab_size = 256, .bias = true, .dropout = 0.2};
  torch::manual_seed(5);
  auto plain = ddp::make_model(gpt);
  torch::manual_seed(5);
  auto checkpointed = ddp::make_model(gpt);
  ddp::checkpoint_activations(*checkpointed, "full");
  auto expected = gradients(*plain, rows);
  CHECK(largest_difference(expected, gradients(*checkpointed, rows)) < 1e-6);
  // Evaluation (no gradients) runs the blocks as they are.
  torch::NoGradGuard no_grad;
  auto ids = rows.narrow(1, 0, 64);
  plain->eval();
  checkpointed->eval();
  CHECK(torch::equal(plain->forward(ids), checkpointed->forward(ids)));
}

TEST_CASE("activation checkpointing: an 8-layer Llama's peak memory in a step is at most 0.6x the plain run's "
          "(printed)",
          "[activation_checkpointing]") {
  auto rows = batch_of(8, 128);
  std::map<std::string, int64_t> peaks;
  for (const std::string mode : {"none", "full", "every_2"}) {
    torch::manual_seed(5);
    auto model = ddp::make_model(llama(8));
    ddp::checkpoint_activations(*model, mode);
    gradients(*model, rows);  // gradients allocated, as in any step after the first
    CountingAllocator counting;
    const int64_t before = CountingAllocator::current();
    CountingAllocator::reset_peak();
    gradients(*model, rows);
    peaks[mode] = CountingAllocator::peak() - before;
  }
  std::printf("activation checkpointing, 8-layer Llama (dim 64, 8 x 128 tokens): peak allocated in a step "
              "%.1f MiB plain, %.1f MiB full (%.2fx), %.1f MiB every_2 (%.2fx)\n",
              peaks["none"] / 1048576.0, peaks["full"] / 1048576.0, double(peaks["full"]) / double(peaks["none"]),
              peaks["every_2"] / 1048576.0, double(peaks["every_2"]) / double(peaks["none"]));
  CHECK(peaks["none"] > 0);
  CHECK(peaks["full"] <= 0.6 * static_cast<double>(peaks["none"]));
  CHECK(peaks["every_2"] < peaks["none"]);
}

TEST_CASE("activation checkpointing: a chained TorchScript module's blocks run again in backward too, with the "
          "same gradients",
          "[activation_checkpointing][torchscript]") {
  ddp::ModelConfig config;
  config.name = "torchscript";
  config.torchscript.path = ddp::test::python_fixture("sequential.pt");  // Linear, ReLU, Linear, Tanh, Linear
  auto x = torch::randn({64, 20});
  std::map<std::string, std::map<std::string, torch::Tensor>> grads;
  for (const std::string mode : {"none", "full"}) {
    auto model = ddp::make_model(config);
    // Counted inside the checkpoint: once in forward, once more in backward when it recomputes.
    auto runs = std::make_shared<int>(0);
    model->wrap_blocks([runs](std::size_t, ddp::ModelBlock& block) {
      block.forward = [runs, inner = block.forward](torch::Tensor in) {
        ++*runs;
        return inner(std::move(in));
      };
    });
    ddp::checkpoint_activations(*model, mode);
    model->forward(x).square().mean().backward();
    const auto blocks = static_cast<int>(model->blocks().size());
    CHECK(*runs == (mode == "full" ? 2 * blocks : blocks));
    for (const auto& item : model->named_parameters()) grads[mode].emplace(item.key(), item.value().grad().clone());
  }
  CHECK(largest_difference(grads["none"], grads["full"]) < 1e-6);
}

TEST_CASE("activation checkpointing: a mode it does not know is refused by the config, naming the ones it does, and a "
          "model without blocks says why it cannot be checkpointed",
          "[activation_checkpointing]") {
  CHECK_THROWS_WITH(ddp::parse_train_config("model: {name: mlp}\n", {"model.activation_checkpointing=sometimes"}),
                    Contains("model.activation_checkpointing: expected none, full or every_N (N from 1: every Nth "
                             "block, from the first), got 'sometimes'"));
  CHECK_THROWS_WITH(ddp::parse_train_config("model: {name: mlp}\n", {"model.activation_checkpointing=every_0"}),
                    Contains("got 'every_0'"));
  CHECK_NOTHROW(ddp::parse_train_config("model: {name: mlp}\n", {"model.activation_checkpointing=every_3"}));
  // A model that is no sequence of blocks cannot be: it says why.
  ddp::ModelConfig config;
  config.name = "torchscript";
  config.torchscript.path = ddp::test::python_fixture("mlp.pt");
  CHECK_THROWS_WITH(ddp::checkpoint_activations(*ddp::make_model(config), "full"),
                    Contains("model.activation_checkpointing: the model cannot be checkpointed block by block: its "
                             "forward computes aten::relu itself") &&
                        Contains("use model.activation_checkpointing: none"));
  config.name = "linear3";
  CHECK_THROWS_WITH(ddp::checkpoint_activations(*ddp::make_model(config), "every_2"),
                    Contains("block by block: it is not a sequence of layers"));
}

}  // namespace DDP_TEST_FILE
