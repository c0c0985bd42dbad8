// The GPT: nanoGPT's names, shapes and initialisation (against scripts/nanogpt.py, built by Python
// with the same seed), causality, the tied head, and sampling.
#include <catch2/catch.hpp>
#include <torch/torch.h>
#include <torch/version.h>

#include <cmath>

#include "ddp/common/error.h"
#include "ddp/model/gpt.h"
#include "ddp/model/token_sampler.h"
#include "ddp/model/state_dict_file.h"
#include "ddp/model/python_state_dict.h"
#include "ddp/model/safetensors.h"
#include "support/subprocess.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using Catch::Contains;

namespace {

ddp::GptOptions small(bool bias) {
  ddp::GptOptions o;
  o.n_layer = 2;
  o.n_head = 2;
  o.n_embd = 16;
  o.block_size = 8;
  o.vocab_size = 11;
  o.bias = bias;
  return o;
}

}  // namespace

TEST_CASE("a GPT has nanoGPT's state dict: keys, order, shapes and the seeded initialisation", "[gpt][python]") {
  for (bool bias : {false, true}) {
    ddp::test::TempDir dir;
    std::string reference = dir.file("nanogpt.pt");
    auto python = ddp::test::run_command(
        {"/usr/bin/python3", std::string(DDP_SOURCE_DIR) + "/tests/support/nanogpt_init.py", reference, "5", "2", "2",
         "16", "8", "11", bias ? "1" : "0"},
        std::chrono::seconds(120));
    INFO(python.out << python.err);
    REQUIRE(python.exit_code == 0);
    torch::manual_seed(5);
    ddp::Gpt model(small(bias));
    auto ours = ddp::python_state_dict(model);
    auto theirs = ddp::read_state_dict_file(reference);
    REQUIRE(ours.size() == theirs.size());
    for (std::size_t i = 0; i < ours.size(); ++i) {
      INFO(ours[i].first << " / " << theirs[i].first);
      CHECK(ours[i].first == theirs[i].first);
      CHECK(ours[i].second.sizes() == theirs[i].second.sizes());
      // The same draws in the same order: equal to the bit, so a run is nanoGPT's from step 0.
      CHECK(torch::equal(ours[i].second, theirs[i].second));
    }
    CHECK(ours.front().first == "transformer.wte.weight");
    CHECK(ours.back().first == "lm_head.weight");
  }
}

TEST_CASE("a GPT is causal, its head is the token embedding, and it refuses over-long input", "[gpt]") {
  torch::manual_seed(1);
  ddp::Gpt model(small(true));
  auto a = torch::randint(0, 11, {3, 8}, torch::kLong);
  auto b = a.clone();
  b.narrow(1, 5, 3).fill_(7);  // only positions 5.. differ
  auto la = model.forward(a), lb = model.forward(b);
  REQUIRE(la.sizes() == std::vector<int64_t>{3, 8, 11});
  CHECK(torch::allclose(la.narrow(1, 0, 5), lb.narrow(1, 0, 5)));
  CHECK(!torch::allclose(la.narrow(1, 5, 3), lb.narrow(1, 5, 3)));

  auto named = model.named_parameters();
  CHECK(named["lm_head.weight"].data_ptr() == named["transformer.wte.weight"].data_ptr());
  model.forward(a).sum().backward();
  CHECK(named["transformer.wte.weight"].grad().defined());

  CHECK_THROWS_WITH(model.forward(torch::zeros({1, 9}, torch::kLong)),
                    Contains("a sequence of 9 tokens is longer than the 8 positions the model has"));
  CHECK_THROWS_WITH(model.forward(torch::zeros({1, 3})), Contains("takes int64 token ids [B, T]"));
}

TEST_CASE("a file whose lm_head.weight differs from transformer.wte.weight is refused, not loaded over the "
          "embedding, and integers for float weights too",
          "[gpt]") {
  // Note [Tied weights in a file]: the tied head, loaded last, used to replace the file's embedding.
  ddp::test::TempDir dir;
  torch::manual_seed(3);
  ddp::Gpt source(small(false)), target(small(false));
  auto entries = ddp::python_state_dict(source);
  ddp::write_safetensors(dir.file("tied.safetensors"), entries, {});
  target.load_weights(dir.file("tied.safetensors"));  // both names, the same values: one tensor
  CHECK(torch::equal(target.named_parameters()["transformer.wte.weight"], source.named_parameters()["transformer.wte.weight"]));

  ddp::Gpt other(small(false));
  CHECK(torch::equal(other.named_parameters()["lm_head.weight"], other.named_parameters()["transformer.wte.weight"]));
  auto untied = entries;
  untied.back().second = torch::randn_like(untied.back().second);  // lm_head.weight, last
  REQUIRE(untied.back().first == "lm_head.weight");
  ddp::write_safetensors(dir.file("untied.safetensors"), untied, {});
  CHECK_THROWS_WITH(other.load_weights(dir.file("untied.safetensors")),
                    dir.file("untied.safetensors") + ": transformer.wte.weight and lm_head.weight differ, but this "
                                                     "model ties them (one tensor for both): the file's weights are "
                                                     "untied, and neither can stand for the other");

  auto integers = entries;
  integers.front().second = integers.front().second.to(torch::kInt);
  integers.back().second = integers.front().second;
  ddp::write_safetensors(dir.file("integers.safetensors"), integers, {});
  const auto kept = other.named_parameters()["transformer.wte.weight"].clone();
  CHECK_THROWS_WITH(other.load_weights(dir.file("integers.safetensors")),
                    Contains("integers for floating-point tensors transformer.wte.weight (file Int, model Float), "
                             "lm_head.weight (file Int, model Float)"));
  CHECK(torch::equal(other.named_parameters()["transformer.wte.weight"], kept));  // a refused file changes nothing
}

TEST_CASE("sampling is seeded, greedy at temperature 0, and checks the prompt", "[gpt]") {
  torch::manual_seed(2);
  ddp::Gpt model(small(false));
  ddp::SamplingOptions options;
  options.tokens = 20;  // longer than the block: the context is cropped
  options.seed = 3;
  auto first = ddp::sample_tokens(model, {1, 2}, options);
  CHECK(first.size() == 20);
  CHECK(ddp::sample_tokens(model, {1, 2}, options) == first);
  for (int64_t t : first) CHECK((t >= 0 && t < 11));
  options.temperature = 0;
  auto greedy = ddp::sample_tokens(model, {1, 2}, options);
  options.seed = 4;
  CHECK(ddp::sample_tokens(model, {1, 2}, options) == greedy);
  options.temperature = 1;
  options.top_k = 1;  // only the most likely token is left to draw
  CHECK(ddp::sample_tokens(model, {1, 2}, options) == greedy);
  options.top_k = 0;
  options.temperature = 1e-320;  // the logits overflow divided by it: temperature 0's limit, not NaNs
  CHECK(ddp::sample_tokens(model, {1, 2}, options) == greedy);
  int64_t emitted = 0;
  ddp::sample_tokens(model, {1}, options, [&](int64_t) { ++emitted; });
  CHECK(emitted == 20);
  CHECK_THROWS_WITH(ddp::sample_tokens(model, {}, options), Contains("the prompt is empty"));
  CHECK_THROWS_WITH(ddp::sample_tokens(model, {11}, options), Contains("outside the model's vocabulary (ids 0 to 10)"));
  // Weights that are no numbers, as a diverged run's: said as such, at temperature 0 and above.
  {
    torch::NoGradGuard no_grad;
    for (auto& parameter : model.parameters()) parameter.fill_(std::nan(""));
  }
  for (double temperature : {0.0, 1.0}) {
    options.temperature = temperature;
    CHECK_THROWS_WITH(ddp::sample_tokens(model, {1}, options),
                      "the model's output for token 1 is not a number (NaN or infinite): its weights are broken, as a "
                      "diverged run's are");
  }
}

TEST_CASE("fused and explicit attention agree, where the LibTorch has the fused form", "[gpt]") {
  ddp::GptOptions explicit_form = small(true), fused = small(true);
  explicit_form.fused_attention = false;
  fused.fused_attention = true;
  if (!ddp::gpt_fused_attention()) {
    CHECK_THROWS_WITH(ddp::Gpt(fused), Contains("the fused scaled_dot_product_attention needs LibTorch 2.x"));
    WARN("skipped: LibTorch " TORCH_VERSION " has no fused attention to compare with the explicit form");
    return;
  }
  torch::manual_seed(9);
  ddp::Gpt a(explicit_form);
  torch::manual_seed(9);
  ddp::Gpt b(fused);  // the same draws: the mask buffer takes none
  auto idx = torch::randint(0, 11, {4, 8}, torch::kLong);
  auto ya = a.forward(idx), yb = b.forward(idx);
  CHECK(torch::allclose(ya, yb, 1e-5, 1e-5));
  ya.square().sum().backward();
  yb.square().sum().backward();
  auto ga = a.named_parameters(), gb = b.named_parameters();
  for (const auto& item : ga) CHECK(torch::allclose(item.value().grad(), gb[item.key()].grad(), 1e-4, 1e-5));
}

}  // namespace DDP_TEST_FILE
