// Note [Deferred initialisation]: a deferred build keeps each parameter's shape without storage, and
// a parameter materialised on its own, in any order, has the whole build's values under the seed.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <algorithm>

#include "ddp/model/deferred_init.h"
#include "ddp/model/model_registry.h"
#include "ddp/model/python_state_dict.h"
#include "support/subprocess.h"

namespace {

ddp::ModelConfig family(const std::string& name) {
  ddp::ModelConfig config;
  config.name = name;
  config.block_size = 16;
  config.mlp.hidden = {64, 32};
  config.gpt.n_layer = 2;
  config.gpt.n_head = 2;
  config.gpt.n_embd = 32;
  config.gpt.vocab_size = 97;
  config.llama.n_layer = 2;
  config.llama.n_head = 4;
  config.llama.n_kv_heads = 2;
  config.llama.dim = 32;
  config.llama.vocab_size = 97;
  return config;
}

int64_t stored_bytes(const torch::nn::Module& model) {
  int64_t bytes = 0;
  for (const auto& p : model.parameters()) bytes += static_cast<int64_t>(p.storage().nbytes());
  return bytes;
}

}  // namespace

TEST_CASE("a deferred build holds no parameter but the norms' and materialises each alone, in any order, to the "
          "whole build's values, for the gpt, the llama (tied and untied) and the mlp",
          "[model][deferred]") {
  for (const std::string name : {"gpt", "llama", "llama_tied", "mlp"}) {
    ddp::ModelConfig config = family(name == "llama_tied" ? "llama" : name);
    config.llama.tie_embeddings = name == "llama_tied";
    ddp::ModelContext whole_context;
    whole_context.seed = 11;
    auto whole = ddp::make_model(config, whole_context);
    const torch::Tensor after_whole = ddp::default_generator_state();

    ddp::ModelContext deferred_context = whole_context;
    deferred_context.defer_parameters = true;
    auto deferred = ddp::make_model(config, deferred_context);
    INFO(name);
    REQUIRE(deferred->deferred_init() != nullptr);
    // What follows the build draws as after a whole one (dropout, the data order).
    CHECK(torch::equal(ddp::default_generator_state(), after_whole));
    // Only the norms' weights (ones, no draws) keep storage: under 2% of the whole.
    CHECK(stored_bytes(*deferred) * 50 < stored_bytes(*whole));
    auto named = deferred->named_parameters();
    std::vector<torch::Tensor> backwards;
    for (const auto& item : named) backwards.insert(backwards.begin(), item.value());
    for (const auto& t : backwards) {
      if (!deferred->deferred_init()->deferred(t)) continue;
      CHECK(t.storage().nbytes() == 0);
      deferred->deferred_init()->materialize({t});  // one alone, last first
      CHECK(t.storage().nbytes() == static_cast<std::size_t>(t.numel() * t.element_size()));
    }
    CHECK(deferred->deferred_init()->pending() == 0);
    auto reference = whole->named_parameters();
    REQUIRE(reference.size() == named.size());
    for (const auto& item : reference) {
      INFO(item.key());
      CHECK(torch::equal(item.value(), named[item.key()]));
    }
  }
}

TEST_CASE("a build is whole without a seed, with model.init_from, and for a family that fills no parameter through "
          "init_parameter",
          "[model][deferred]") {
  ddp::ModelContext context;
  context.defer_parameters = true;
  CHECK(ddp::make_model(family("mlp"), context)->deferred_init() == nullptr);  // no seed: no replay
  context.seed = 3;
  CHECK(ddp::make_model(family("mlp"), context)->deferred_init() != nullptr);
  CHECK(ddp::make_model(family("convnet"), context)->deferred_init() == nullptr);
  // A parameter a pass freed (another stage's layer) gets no values: no fill runs on its no elements.
  auto staged = ddp::make_model(family("mlp"), context);
  REQUIRE(staged->deferred_init() != nullptr);
  for (auto& p : staged->parameters()) p.set_data(torch::empty({0}));
  staged->deferred_init()->materialize_all();
  CHECK(staged->deferred_init()->pending() == 0);
  CHECK(staged->parameters().front().numel() == 0);
  // The file gives the values: nothing to replay.
  ddp::test::TempDir dir;
  auto saved = ddp::make_model(family("mlp"));
  ddp::save_python_state_dict(*saved, dir.file("model.pt"));
  ddp::ModelConfig from_file = family("mlp");
  from_file.init_from = dir.file("model.pt");
  auto loaded = ddp::make_model(from_file, context);
  CHECK(loaded->deferred_init() == nullptr);
  CHECK(torch::equal(loaded->parameters().front(), saved->parameters().front()));
}
