// The Llama family: Hugging Face's names, and logits equal to an independent PyTorch Llama's
// (tests/support/llama_reference.py: grouped-query attention, llama3 rope scaling) from weights it
// wrote as safetensors; Llama's MLP width rule; and the config's refusals.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "ddp/common/error.h"
#include "ddp/model/model_registry.h"
#include "ddp/model/python_state_dict.h"
#include "ddp/model/safetensors.h"
#include "ddp/model/token_stepper.h"
#include "support/subprocess.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

namespace {

// The reference's shape (llama_reference.py's constants).
ddp::ModelConfig reference_shape() {
  ddp::ModelConfig config;
  config.name = "llama";
  config.block_size = 80;
  ddp::LlamaConfig& c = config.llama;
  c.n_layer = 2;
  c.n_head = 6;
  c.n_kv_heads = 2;
  c.dim = 48;
  c.multiple_of = 16;  // Llama's rule: 8 · 48 / 3 = 128
  c.rope_theta = 100;
  c.rope_scaling = "llama3";
  c.rope_factor = 8;
  c.rope_low_freq_factor = 1;
  c.rope_high_freq_factor = 4;
  c.rope_original_context = 32;
  c.norm_eps = 1e-5;
  c.vocab_size = 97;
  return config;
}

}  // namespace

TEST_CASE("a Llama imports an independent PyTorch Llama's safetensors weights and gives its logits within 1e-5, "
          "grouped-query attention and llama3 rope scaling on, past position 64",
          "[model][llama][python]") {
  ddp::test::TempDir dir;
  auto python = ddp::test::run_command(
      {"/usr/bin/python3", std::string(DDP_SOURCE_DIR) + "/tests/support/llama_reference.py", dir.path()},
      std::chrono::seconds(120));
  INFO(python.out << python.err);
  REQUIRE(python.exit_code == 0);

  ddp::ModelConfig config = reference_shape();
  config.init_from = dir.file("weights.safetensors");
  auto model = ddp::make_model(config);
  // Every name is Hugging Face's, and the file had every one of them (init_from is strict).
  auto names = ddp::python_state_dict(*model);
  CHECK(names.front().first == "model.embed_tokens.weight");
  CHECK(names.back().first == "lm_head.weight");
  CHECK(model->blocks().size() == 4);  // the embedding, two layers, the norm with the head

  ddp::SafetensorsFile io(dir.file("io.safetensors"));
  REQUIRE(io.entries().size() == 2);
  torch::Tensor ids = io.read(io.entries()[0]), expected = io.read(io.entries()[1]);
  REQUIRE(ids.sizes() == std::vector<int64_t>{2, 80});
  torch::NoGradGuard no_grad;
  model->eval();
  torch::Tensor logits = model->forward(ids);
  REQUIRE(logits.sizes() == expected.sizes());
  const double everywhere = (logits - expected).abs().max().item<double>();
  const double late = (logits - expected).narrow(1, 64, 16).abs().max().item<double>();
  INFO("largest difference " << everywhere << ", past position 64 " << late);
  CHECK(everywhere <= 1e-5);
  CHECK(late <= 1e-5);
  CHECK(expected.abs().max().item<double>() > 1);  // logits large enough for the bound to mean something
}

TEST_CASE("a Llama's MLP width follows Llama's rule, and shapes that cannot make heads are refused", "[model][llama]") {
  ddp::LlamaConfig c;
  c.dim = 4096;
  c.multiple_of = 256;
  CHECK(ddp::llama_ffn_dim(c) == 11008);  // Llama 2 7B
  c.ffn_dim_multiplier = 1.3;
  CHECK(ddp::llama_ffn_dim(c) == 14336);  // Llama 3 8B
  c.ffn_dim = 1000;
  CHECK(ddp::llama_ffn_dim(c) == 1000);  // given

  ddp::ModelConfig config = reference_shape();
  config.llama.n_kv_heads = 4;  // 6 query heads cannot share 4 key/value heads
  CHECK_THROWS_AS(ddp::make_model(config), ddp::ConfigError);
  config.llama.n_kv_heads = 0;
  config.llama.n_head = 5;  // 48 does not divide into 5 heads
  CHECK_THROWS_WITH(ddp::make_model(config), Catch::StartsWith("model.n_head: model.dim 48, model.n_head 5"));

  // Its input is token ids.
  auto model = ddp::make_model(reference_shape());
  CHECK_THROWS_WITH(model->forward(torch::zeros({2, 8})),
                    "model.name llama takes int64 token ids [B, T], got CPUFloatType of 2 dimensions");

  // Tied: the head is the embedding, one tensor under both names.
  config = reference_shape();
  config.llama.tie_embeddings = true;
  auto tied = ddp::make_model(config);
  auto state = ddp::python_state_dict(*tied);
  CHECK(state.front().second.data_ptr() == state.back().second.data_ptr());
}

TEST_CASE("a Llama sampled with its KV cache gives the logits of a whole forward at every position, and past "
          "model.block_size those of the window it keeps", "[model][llama]") {
  torch::manual_seed(5);
  ddp::ModelConfig config = reference_shape();
  config.block_size = 24;
  auto model = ddp::make_model(config);
  model->eval();
  torch::NoGradGuard no_grad;
  auto stepper = model->token_stepper();
  REQUIRE(stepper);
  std::vector<int64_t> history = {3, 14, 15, 92, 65};  // a prompt, then one token at a time
  auto whole = [&](std::size_t window) {
    std::vector<int64_t> last(history.end() - static_cast<std::ptrdiff_t>(window), history.end());
    return model->forward(torch::tensor(last, torch::kLong).unsqueeze(0)).select(1, -1).squeeze(0);
  };
  double worst = (stepper->feed(history) - whole(history.size())).abs().max().item<double>();
  for (int64_t token = 0; history.size() < 24; token = (token * 31 + 7) % 97) {
    history.push_back(token);
    worst = std::max(worst, (stepper->feed({token}) - whole(history.size())).abs().max().item<double>());
  }
  CHECK(worst < 1e-5);
  // The 25th token does not fit: the cache starts again from the last half of the window (12
  // tokens), and grows from there.
  for (std::size_t window = 12; window < 20; ++window) {
    history.push_back(static_cast<int64_t>(window));
    CHECK((stepper->feed({history.back()}) - whole(window)).abs().max().item<double>() < 1e-5);
  }
}

}  // namespace DDP_TEST_FILE
