// Note [Deferred initialisation]: a deferred build keeps each parameter's shape without storage, and
// a parameter materialised on its own, in any order, has the whole build's values under the seed.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <functional>

#include "ddp/model/deferred_init.h"
#include "ddp/model/model_registry.h"
#include "ddp/model/python_state_dict.h"
#include "support/gpu.h"
#include "support/subprocess.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

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
  config.dlrm.embedding_rows = {70000};  // more than a block of rows from one generator (dlrm.cpp)
  config.dlrm.embedding_dim = 4;
  return config;
}

int64_t stored_bytes(const torch::nn::Module& model) {
  int64_t bytes = 0;
  for (const auto& p : model.parameters()) bytes += static_cast<int64_t>(p.storage().nbytes());
  return bytes;
}

// Takes parts of deferred `p` as the passes do (take_parts): a matrix as two tensor-parallel boxes
// unless `flat`, anything else as a run of its elements, as a sharded unit's share; each must equal
// the same part of `expected`.
void check_parts(ddp::DeferredInit& deferred, const torch::Tensor& p, const torch::Tensor& expected, bool flat = false) {
  std::vector<int64_t> view = p.sizes().vec();
  std::vector<ddp::TensorPart> parts;
  if (!flat && p.dim() == 2 && p.size(0) > 1 && p.size(1) > 1) {
    parts = {{{0, 0}, {view[0] / 2, view[1]}}, {{1, view[1] / 2}, {view[0] - 1, view[1] - view[1] / 2}}};
  } else {
    view = {p.numel()};
    parts = {{{p.numel() / 3}, {p.numel() - p.numel() / 3}}};
  }
  auto taken = deferred.take_parts(p, view, parts);
  REQUIRE(taken);
  REQUIRE(taken->size() == parts.size());
  for (std::size_t i = 0; i < parts.size(); ++i) {
    CHECK((*taken)[i].scalar_type() == p.scalar_type());
    CHECK(torch::equal((*taken)[i], ddp::cut_part(expected, view, parts[i])));
  }
  CHECK(!deferred.deferred(p));
}

// A deferred build moved by `move` (Model::to) before any pass gave it values: each waiting
// parameter is where the move put it, still without storage, and its values, whole or in parts, are a
// whole build's moved afterwards, bit for bit; from model.init_from's safetensors too.
void check_moved_before_values(const std::function<void(ddp::Model&)>& move, torch::Device device, torch::Dtype dtype) {
  ddp::test::TempDir dir;
  ddp::ModelContext saved_context;
  saved_context.seed = 8;
  std::filesystem::create_directories(dir.file("mlp"));
  ddp::save_model(*ddp::make_model(family("mlp"), saved_context), dir.file("mlp"));
  for (const std::string name : {"gpt", "llama", "mlp", "dlrm", "convnet", "mlp_from_file"}) {
    INFO(name);
    ddp::ModelConfig config = family(name == "mlp_from_file" ? "mlp" : name);
    if (name == "mlp_from_file") config.init_from = dir.file("mlp/model.safetensors");
    ddp::ModelContext context;
    context.seed = 11;
    auto whole = ddp::make_model(config, context);
    move(*whole);
    context.defer_parameters = true;
    for (const bool in_parts : {false, true}) {
      auto deferred = ddp::make_model(config, context);
      REQUIRE(deferred->deferred_init() != nullptr);
      const std::size_t waiting = deferred->deferred_init()->pending();
      move(*deferred);
      CHECK(deferred->deferred_init()->pending() == waiting);
      auto reference = whole->named_parameters();
      for (const auto& item : deferred->named_parameters()) {
        INFO(item.key());
        const torch::Tensor& p = item.value();
        CHECK(p.device() == device);
        CHECK(p.scalar_type() == dtype);
        if (!deferred->deferred_init()->deferred(p)) {
          if (ddp::has_values(p))  // else taken in parts already, under a name it is tied to
            CHECK(torch::equal(p, reference[item.key()]));  // built with its values, moved as any
          continue;
        }
        CHECK(p.storage().nbytes() == 0);
        if (in_parts) {
          check_parts(*deferred->deferred_init(), p, reference[item.key()]);
          continue;
        }
        deferred->deferred_init()->materialize({p});
        CHECK(p.device() == device);
        CHECK(torch::equal(p, reference[item.key()]));
        CHECK(p.strides() == reference[item.key()].strides());  // channels-last weights stay so
      }
      CHECK(deferred->deferred_init()->pending() == 0);
    }
  }
}

}  // namespace

TEST_CASE("a deferred build holds no parameter but the norms' and materialises each alone, in any order, to the "
          "whole build's values, for the gpt, the llama (tied and untied), the mlp, DLRM and the ConvNet (channels-last "
          "and not), and each part taken alone has the same part's values",
          "[model][deferred]") {
  for (const std::string name : {"gpt", "llama", "llama_tied", "mlp", "dlrm", "convnet", "convnet_nchw"}) {
    ddp::ModelConfig config = family(name == "llama_tied" ? "llama" : name == "convnet_nchw" ? "convnet" : name);
    config.llama.tie_embeddings = name == "llama_tied";
    config.convnet.channels_last = name == "convnet";
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
      CHECK(item.value().strides() == named[item.key()].strides());  // channels-last weights stay so
    }
    // Parts alone, as the tensor pass and the sharding engine take them: cut from the fill.
    for (const bool flat : {false, true}) {
      auto again = ddp::make_model(config, deferred_context);
      for (const auto& item : again->named_parameters())
        if (again->deferred_init()->deferred(item.value()))
          check_parts(*again->deferred_init(), item.value(), reference[item.key()], flat);
    }
  }
}

TEST_CASE("a build is whole without a seed and for a family that fills no parameter through init_parameter",
          "[model][deferred]") {
  ddp::ModelContext context;
  context.defer_parameters = true;
  CHECK(ddp::make_model(family("mlp"), context)->deferred_init() == nullptr);  // no seed: no replay
  context.seed = 3;
  CHECK(ddp::make_model(family("mlp"), context)->deferred_init() != nullptr);
  CHECK(ddp::make_model(family("linear3"), context)->deferred_init() == nullptr);
  // A parameter a pass freed (another stage's layer) gets no values: no fill runs on its no elements.
  auto staged = ddp::make_model(family("mlp"), context);
  REQUIRE(staged->deferred_init() != nullptr);
  for (auto& p : staged->parameters()) p.set_data(torch::empty({0}));
  staged->deferred_init()->materialize_all();
  CHECK(staged->deferred_init()->pending() == 0);
  CHECK(staged->parameters().front().numel() == 0);
}

TEST_CASE("a deferred build reads model.init_from's values only as each parameter is materialised, from model.pt, "
          "safetensors and GPT-2's layout, and a family that built whole reads them at once",
          "[model][deferred]") {
  ddp::test::TempDir dir;
  ddp::ModelContext context;
  context.defer_parameters = true;
  context.seed = 3;  // not the saved models' seed: every value must come from the file
  struct Source {
    std::string family, file;
  };
  // save_model writes model.pt in nanoGPT's names and model.safetensors in Hugging Face's (GPT-2's
  // transposed Conv1D weights, for the gpt) beside config.json.
  for (const auto& [name, file] : {Source{"gpt", "gpt"}, Source{"gpt", "gpt/model.pt"}, Source{"llama", "llama"},
                                   Source{"mlp", "mlp/model.pt"}, Source{"mlp", "mlp/model.safetensors"},
                                   Source{"convnet", "convnet/model.safetensors"}}) {
    INFO(name << " from " << file);
    ddp::ModelContext saved_context;
    saved_context.seed = 8;
    auto saved = ddp::make_model(family(name), saved_context);
    std::filesystem::create_directories(dir.file(name));
    ddp::save_model(*saved, dir.file(name));
    ddp::ModelConfig config = family(name);
    config.init_from = dir.file(file);
    auto loaded = ddp::make_model(config, context);
    REQUIRE(loaded->deferred_init() != nullptr);
    CHECK(stored_bytes(*loaded) == 0);  // the norms' too: the file gives them
    auto named = loaded->named_parameters();
    std::vector<std::string> backwards;
    for (const auto& item : named) backwards.insert(backwards.begin(), item.key());
    for (const auto& key : backwards) {
      loaded->deferred_init()->materialize({named[key]});
      CHECK(torch::equal(named[key], saved->named_parameters()[key]));
    }
    CHECK(loaded->deferred_init()->pending() == 0);
    // Parts alone: only their bytes from safetensors (GPT-2's transposed weights as mirrored boxes),
    // cut from the whole record from model.pt.
    auto parted = ddp::make_model(config, context);
    for (const auto& item : parted->named_parameters()) {
      INFO(item.key());
      if (!parted->deferred_init()->deferred(item.value())) continue;  // tied to one taken already
      check_parts(*parted->deferred_init(), item.value(), saved->named_parameters()[item.key()]);
    }
    CHECK(parted->deferred_init()->pending() == 0);
  }
  // The tutorial's three layers build whole (LibTorch draws them): they read the file at once.
  ddp::ModelConfig linear3 = family("linear3");
  auto saved = ddp::make_model(linear3);
  ddp::save_python_state_dict(*saved, dir.file("linear3.pt"));
  linear3.init_from = dir.file("linear3.pt");
  auto loaded = ddp::make_model(linear3, context);
  REQUIRE(loaded->deferred_init() == nullptr);
  CHECK(torch::equal(loaded->parameters().front(), saved->parameters().front()));
}

TEST_CASE("a weights file that shrinks before a pass reads a deferred parameter stops that read in one line naming "
          "the tensor",
          "[model][deferred]") {
  ddp::test::TempDir dir;
  ddp::ModelContext saved_context;
  saved_context.seed = 8;
  std::filesystem::create_directories(dir.file("mlp"));
  ddp::save_model(*ddp::make_model(family("mlp"), saved_context), dir.file("mlp"));
  ddp::ModelConfig config = family("mlp");
  config.init_from = dir.file("mlp/model.safetensors");
  ddp::ModelContext context;
  context.defer_parameters = true;
  context.seed = 3;
  auto loaded = ddp::make_model(config, context);
  REQUIRE(loaded->deferred_init() != nullptr);
  std::filesystem::resize_file(config.init_from, 200);  // its header was read; its data are gone
  auto named = loaded->named_parameters();
  CHECK_THROWS_WITH(loaded->deferred_init()->materialize({named["layers.0.weight"]}),
                    Catch::Contains("model.init_from: reading tensor 'layers.0.weight': " + config.init_from +
                                    ": ended early"));
  const torch::Tensor& last = named["layers.4.weight"];
  CHECK_THROWS_WITH(loaded->deferred_init()->take_parts(last, last.sizes(), {{{0, 0}, {1, last.size(1)}}}),
                    Catch::Contains("model.init_from: reading tensor 'layers.4.weight': " + config.init_from +
                                    ": ended early"));
}

TEST_CASE("a deferred build cast before its passes casts what waits without reading it, and gets a whole build's "
          "values cast, whole and in parts",
          "[model][deferred]") {
  check_moved_before_values([](ddp::Model& m) { m.to(torch::kDouble); }, torch::kCPU, torch::kDouble);
  check_moved_before_values([](ddp::Model& m) { m.to(torch::kCPU, torch::kBFloat16); }, torch::kCPU, torch::kBFloat16);
}

TEST_CASE("on a GPU: a deferred build moved to the GPU before its passes moves what waits without values, and gets "
          "a whole build's values there, whole and in parts",
          "[model][deferred][gpu]") {
  SKIP_WITHOUT_GPU();
  const torch::Device gpu(torch::kCUDA, 0);
  check_moved_before_values([&](ddp::Model& m) { m.to(gpu); }, gpu, torch::kFloat);
  check_moved_before_values([&](ddp::Model& m) { m.to(gpu, torch::kBFloat16); }, gpu, torch::kBFloat16);
}

}  // namespace DDP_TEST_FILE
