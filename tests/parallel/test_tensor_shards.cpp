// Tensor parallelism applied to the GPT in-process (tensor_shards.h): ranks as threads split a GPT
// as its family's plan says; each rank's logits are its slice of the whole model's, the
// loss-parallel cross-entropy gives the whole model's loss, each slice's gradient is its slice of
// the whole gradient, and materialize() gives the whole weights back.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <stdexcept>
#include <vector>

#include "ddp/common/error.h"
#include "ddp/model/gpt.h"
#include "ddp/model/rank_random.h"
#include "ddp/model/routed_layers.h"
#include "ddp/parallel/tensor_parallel.h"
#include "ddp/parallel/tensor_shards.h"
#include "support/thread_ranks.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

namespace {

constexpr int kParts = 2;
constexpr int64_t kVocab = 64;

ddp::GptOptions small_gpt() {
  ddp::GptOptions o;
  o.n_layer = 2;
  o.n_head = 4;
  o.n_embd = 32;
  o.block_size = 16;
  o.vocab_size = kVocab;
  o.bias = true;
  o.dropout = 0;
  return o;
}

ddp::ModelConfig gpt_config() {
  ddp::ModelConfig config;
  config.name = "gpt";
  config.gpt.n_head = 4;
  config.gpt.n_embd = 32;
  config.gpt.vocab_size = kVocab;
  return config;
}

std::shared_ptr<ddp::Gpt> seeded_gpt() {
  torch::manual_seed(5);
  return std::make_shared<ddp::Gpt>(small_gpt());
}

// Each parameter once (the head's weight is the embedding's), in the model's order.
std::vector<std::pair<std::string, torch::Tensor>> unique_parameters(const torch::nn::Module& model) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  std::set<const c10::TensorImpl*> seen;
  for (const auto& item : model.named_parameters())
    if (seen.insert(item.value().unsafeGetTensorImpl()).second) out.emplace_back(item.key(), item.value());
  return out;
}

// What rank 0's TensorShards refuses `plan` with, "" for nothing; each rank splits a model of its own.
template <typename MakeModel>
std::string refusal(const MakeModel& make_model, const std::vector<ddp::TensorPlanEntry>& plan) {
  std::string message;
  std::vector<decltype(make_model())> models;  // built here: one global generator
  for (int r = 0; r < kParts; ++r) models.push_back(make_model());
  auto errors = ddp::test::run_ranks(kParts, [&](int rank, const ddp::Communicator& group) {
    auto& model = models[static_cast<std::size_t>(rank)];
    std::vector<torch::Tensor> parameters;
    for (const auto& [name, p] : unique_parameters(*model)) parameters.push_back(p);
    try {
      ddp::TensorShards shards(*model, plan, parameters, group);
    } catch (const ddp::ConfigError& e) {
      if (rank == 0) message = e.what();
    }
  });
  for (std::size_t r = 0; r < errors.size(); ++r) {
    INFO("rank " << r << ": " << errors[r]);
    CHECK(errors[r].empty());
  }
  return message;
}

// The whole GPT's forward and backward on a batch: what each split must reproduce.
struct WholeRun {
  std::shared_ptr<ddp::Gpt> model;
  torch::Tensor ids, targets, logits, loss;
  std::vector<std::pair<std::string, torch::Tensor>> parameters;  // with their gradients
};

WholeRun whole_run() {
  WholeRun run;
  run.model = seeded_gpt();
  torch::manual_seed(6);
  run.ids = torch::randint(0, kVocab, {3, 16});
  run.targets = torch::randint(0, kVocab, {3, 16});
  run.logits = run.model->forward(run.ids);
  run.loss = torch::nn::functional::cross_entropy(run.logits.reshape({-1, kVocab}), run.targets.reshape({-1}));
  run.loss.backward();
  run.parameters = unique_parameters(*run.model);
  return run;
}

// Sequence parallelism as parallelize() applies it: the first block's output split along the sequence.
void split_after_first_block(ddp::Gpt& model, const ddp::TensorShards& shards) {
  model.wrap_blocks([&shards](std::size_t index, ddp::ModelBlock& block) {
    if (index == 0) block.forward = [forward = block.forward, &shards](torch::Tensor x) { return shards.split_sequence(forward(x)); };
  });
}

// `whole`'s elements in `boxes`, one after another: what a rank holding those boxes keeps.
torch::Tensor in_boxes(const torch::Tensor& whole, const std::vector<ddp::TensorBox>& boxes) {
  if (boxes.empty()) return whole;
  std::vector<torch::Tensor> parts;
  for (const auto& box : boxes) parts.push_back(ddp::narrow_to(whole, ddp::whole_box(whole.sizes().vec()), box).reshape(-1));
  return torch::cat(parts);
}

}  // namespace

TEST_CASE("the GPT split over 2 ranks by its plan gives the whole model's logits, loss and gradients, and its whole "
          "weights back",
          "[parallel][tensor]") {
  WholeRun run = whole_run();
  const auto& [whole, ids, targets, logits, loss, reference] = run;

  std::vector<std::shared_ptr<ddp::Gpt>> models{seeded_gpt(), seeded_gpt()};  // built here: one global generator
  struct Result {
    torch::Tensor logits, loss;
    std::vector<torch::Tensor> grads, values_whole;
    std::vector<std::vector<ddp::TensorBox>> boxes;
    std::vector<int64_t> local_rows;  // wte's rows after release()
    std::string described;
  };
  std::vector<Result> results(kParts);
  auto errors = ddp::test::run_ranks(kParts, [&](int rank, const ddp::Communicator& group) {
    auto& model = *models[static_cast<std::size_t>(rank)];
    std::vector<torch::Tensor> parameters;
    for (const auto& [name, p] : unique_parameters(model)) parameters.push_back(p);
    ddp::TensorShards shards(model, ddp::builtin_tensor_plan(gpt_config(), kParts), parameters, group);
    Result& r = results[static_cast<std::size_t>(rank)];
    r.described = shards.describe();
    r.logits = model.forward(ids);
    // Catch's checks are for the main thread: a rank throws what it would have asserted.
    if (!shards.splits_output()) throw std::runtime_error("the plan does not split the head's output");
    r.loss = ddp::vocab_parallel_cross_entropy(r.logits.reshape({-1, r.logits.size(-1)}), targets.reshape({-1}),
                                               shards.output_first(), group)
                 .mean();
    r.loss.backward();
    for (std::size_t i = 0; i < parameters.size(); ++i) {
      r.grads.push_back(parameters[i].grad().clone());
      r.boxes.push_back(shards.boxes(i));
    }
    shards.materialize();
    for (const auto& p : parameters) r.values_whole.push_back(p.detach().clone());
    shards.release();
    r.local_rows.push_back(parameters[0].size(0));
  });
  for (std::size_t r = 0; r < errors.size(); ++r) {
    INFO("rank " << r << ": " << errors[r]);
    REQUIRE(errors[r].empty());
  }
  for (int rank = 0; rank < kParts; ++rank) {
    INFO("rank " << rank);
    const Result& r = results[static_cast<std::size_t>(rank)];
    // wte 64 × 32, and per block c_attn 96 × 32 + 96, c_proj 32 × 32, c_fc 128 × 32 + 128, c_proj 32 × 128:
    // 2048 + 2 × 12512 = 27072 float32 elements, 0.10 MiB, of which each rank holds half.
    CHECK(r.described ==
          "dist.tensor 2: 5 Linear layers split colwise and 4 rowwise, 1 Embedding by vocabulary; the logits stay "
          "split by vocabulary (loss-parallel cross-entropy); this rank holds 0.05 MiB of their 0.10 MiB of "
          "parameters (1/2)");
    const int64_t slice = kVocab / kParts;
    CHECK((r.logits - logits.narrow(2, rank * slice, slice)).abs().max().item<double>() < 1e-5);
    CHECK(r.loss.item<double>() == Approx(loss.item<double>()).margin(1e-6));
    REQUIRE(r.grads.size() == reference.size());
    int split = 0;
    for (std::size_t i = 0; i < reference.size(); ++i) {
      INFO(reference[i].first);
      split += r.boxes[i].empty() ? 0 : 1;
      auto expected = in_boxes(reference[i].second.grad(), r.boxes[i]);
      CHECK((r.grads[i].reshape(-1) - expected.reshape(-1)).abs().max().item<double>() < 1e-5);
      CHECK(torch::equal(r.values_whole[i], reference[i].second.detach()));
    }
    CHECK(split == 13);  // wte; per block c_attn's and c_fc's weight and bias, both c_proj weights
    CHECK(r.local_rows.front() == kVocab / kParts);  // wte again this rank's slice after release()
    for (std::size_t i = 0; i < reference.size(); ++i) {
      // c_attn computes q, k and v side by side: each rank keeps its heads of each, three boxes.
      if (reference[i].first == "transformer.h.0.attn.c_attn.weight") {
        REQUIRE(r.boxes[i].size() == 3);
        for (int64_t f = 0; f < 3; ++f) {
          CHECK(r.boxes[i][f].offsets == std::vector<int64_t>{f * 32 + rank * 16, 0});
          CHECK(r.boxes[i][f].sizes == std::vector<int64_t>{16, 32});
        }
      }
      // The MLP's output projection keeps a block of columns: its input features.
      if (reference[i].first == "transformer.h.1.mlp.c_proj.weight") {
        REQUIRE(r.boxes[i].size() == 1);
        CHECK(r.boxes[i][0].offsets == std::vector<int64_t>{0, rank * 64});
        CHECK(r.boxes[i][0].sizes == std::vector<int64_t>{32, 64});
      }
    }
  }
}

TEST_CASE("a plan entry that matches nothing, or a layer that cannot take its style, is refused naming the path",
          "[parallel][tensor]") {
  auto refused = [](const std::vector<ddp::TensorPlanEntry>& plan) { return refusal(seeded_gpt, plan); };
  CHECK(refused({{"transformer.h.*.attn.c_atn", "colwise"}}) ==
        "dist.tensor: the plan's transformer.h.*.attn.c_atn matches no submodule of the model");
  CHECK(refused({{"transformer.ln_f", "colwise"}}) ==
        "dist.tensor: transformer.ln_f is a LayerNorm, which cannot be split colwise (a Linear can, or an Embedding "
        "rowwise)");
  CHECK(refused({{"transformer.wte", "colwise"}}) ==
        "dist.tensor: transformer.wte is an Embedding, which splits rowwise (by vocabulary), not colwise");
  CHECK(refused({{"transformer.wte", "rowwise"}, {"lm_head", "rowwise"}}) ==
        "dist.tensor: lm_head.weight is tied to a layer split another way");
  CHECK(refused({{"transformer.h.0.attn.c_attn", "rowwise"}}) ==
        "dist.tensor: transformer.h.0.attn.c_attn computes 3 projections side by side, which split colwise, not rowwise");
  // Note [Checking a tensor plan]: plans that would compute on a slice as if whole, with no error of their own.
  CHECK(refused({{"lm_head", "colwise", /*output=*/true}}) ==
        "dist.tensor: transformer.wte.weight is split through a layer it is tied to, but transformer.wte is not split, "
        "so it would compute with a slice as if it were the whole weight: split transformer.wte too (the head colwise "
        "with the embedding rowwise)");
  CHECK_THAT(refused({{"transformer.wte", "rowwise"}}),
             Catch::StartsWith("dist.tensor: lm_head.weight is split through a layer it is tied to, but lm_head is not "
                               "split"));
  CHECK(refused({{"transformer.h.*.attn.c_attn", "colwise"}}) ==
        "dist.tensor: transformer.h.0.attn.c_attn is split colwise with no rowwise layer in its block to join its "
        "output, which would go on as a slice; only lm_head, a gpt's or llama's logits, may stay split "
        "(loss-parallel). Pair it with a rowwise layer, or replicate it");
  CHECK_THAT(refused({{"transformer.h.*.mlp.c_proj", "rowwise"}}),
             Catch::StartsWith("dist.tensor: transformer.h.0.mlp.c_proj is split rowwise with no colwise layer in its "
                               "block to split its input"));
  // A pair in another block is no partner: the attention's colwise layer with the MLP's rowwise one.
  CHECK_THAT(refused({{"transformer.h.*.attn.c_attn", "colwise"}, {"transformer.h.*.mlp.c_proj", "rowwise"}}),
             Catch::StartsWith("dist.tensor: transformer.h.0.attn.c_attn is split colwise with no rowwise layer in its "
                               "block"));
  // The built-in plan, and its blocks alone, pass.
  CHECK(refused({{"transformer.h.*.attn.c_attn", "colwise"}, {"transformer.h.*.attn.c_proj", "rowwise"}}).empty());
}

TEST_CASE("a plan's colwise and rowwise partners are found in their block whatever the order they were registered in",
          "[parallel][tensor]") {
  // torchtitan's and Meta's Llama FeedForward: w1 (gate), w2 (down), w3 (up), in that order.
  struct FeedForward : torch::nn::Module {
    FeedForward() {
      register_module("w1", std::make_shared<ddp::RoutedLinear>(8, 16, false));
      register_module("w2", std::make_shared<ddp::RoutedLinear>(16, 8, false));
      register_module("w3", std::make_shared<ddp::RoutedLinear>(8, 16, false));
    }
  };
  struct Block : torch::nn::Module {
    Block() { register_module("feed_forward", std::make_shared<FeedForward>()); }
  };
  auto check = [](const std::vector<ddp::TensorPlanEntry>& plan) {
    return refusal([] { return std::make_shared<Block>(); }, plan);
  };
  CHECK(check({{"feed_forward.w1", "colwise"}, {"feed_forward.w2", "rowwise"}, {"feed_forward.w3", "colwise"}}).empty());
  CHECK_THAT(check({{"feed_forward.w1", "colwise"}, {"feed_forward.w3", "colwise"}}),
             Catch::StartsWith("dist.tensor: feed_forward.w1 is split colwise with no rowwise layer in its block"));
}

TEST_CASE("a tensor plan that cannot split the model says why, naming the key", "[parallel][tensor]") {
  ddp::ModelConfig config = gpt_config();
  config.gpt.n_head = 3;
  CHECK_THROWS_WITH(ddp::builtin_tensor_plan(config, 2),
                    "dist.tensor 2: model.n_head 3 must divide by it (each rank computes whole heads)");
  config = gpt_config();
  config.gpt.vocab_size = 257;
  CHECK_THROWS_WITH(ddp::builtin_tensor_plan(config, 2),
                    Catch::Contains("model.vocab_size 257 must divide by it"));
  config = gpt_config();
  config.name = "mlp";
  CHECK_THROWS_WITH(ddp::builtin_tensor_plan(config, 2),
                    "dist.tensor 2: model.name mlp cannot be split over ranks: tensor parallelism splits the gpt's, the "
                    "llama's and TorchScript modules' layers (dist.tensor_plan); use dist.tensor: 1");
}

TEST_CASE("dist.tensor_plan reads PATH=STYLE entries, and names what is not one", "[parallel][tensor]") {
  auto plan = ddp::parse_tensor_plan(" embed=rowwise,layers.*.attn.q = colwise , head=replicate");
  REQUIRE(plan.size() == 3);
  CHECK(plan[0].path == "embed");
  CHECK(plan[0].style == "rowwise");
  CHECK(plan[1].path == "layers.*.attn.q");
  CHECK(plan[1].style == "colwise");
  CHECK(plan[2].style == "replicate");
  CHECK_FALSE(plan[1].output);
  // Hugging Face's name for the head: split colwise, its logits stay split for the loss-parallel loss.
  CHECK(ddp::parse_tensor_plan("lm_head=colwise")[0].output);
  CHECK_FALSE(ddp::parse_tensor_plan("lm_head=replicate")[0].output);
  CHECK_FALSE(ddp::parse_tensor_plan("head=colwise")[0].output);
  CHECK_THROWS_WITH(ddp::parse_tensor_plan("embed=rowwise,,head=colwise"),
                    Catch::StartsWith("dist.tensor_plan: '' is not PATH=STYLE"));
  CHECK_THROWS_WITH(ddp::parse_tensor_plan("=colwise"), Catch::StartsWith("dist.tensor_plan: '=colwise' is not PATH=STYLE"));
  CHECK_THROWS_WITH(ddp::parse_tensor_plan("head=rowise"),
                    "dist.tensor_plan: head's style 'rowise' is not colwise, rowwise or replicate (did you mean rowwise?)");
  CHECK_THROWS_WITH(ddp::parse_tensor_plan("head=sideways"),
                    "dist.tensor_plan: head's style 'sideways' is not colwise, rowwise or replicate");
  CHECK_THROWS_WITH(ddp::parse_tensor_plan("head=colwise, head=rowwise"), "dist.tensor_plan: head is given twice");
  // Given, it stands for the family's own plan.
  ddp::ModelConfig model = gpt_config();
  ddp::MeshConfig mesh;
  mesh.tensor = 2;
  CHECK(ddp::tensor_plan(model, mesh).size() == 6);
  mesh.tensor_plan = "lm_head=replicate";
  CHECK(ddp::tensor_plan(model, mesh).size() == 1);
}

namespace {

// A column-parallel Linear, dropout on its (split) output, a row-parallel Linear, dropout on its
// (replicated) output: a tensor-parallel region and what follows it.
class RegionChain : public torch::nn::Module {
 public:
  RegionChain() {
    fc1 = register_module("fc1", std::make_shared<ddp::RoutedLinear>(8, 64, true));
    fc2 = register_module("fc2", std::make_shared<ddp::RoutedLinear>(64, 256, true));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor inside = ddp::rank_dropout(torch::ones_like(fc1->forward(x)), 0.5, true);
    region_mask = inside == 0;
    torch::Tensor after = ddp::rank_dropout(torch::ones_like(fc2->forward(inside)), 0.5, true);
    replicated_mask = after == 0;
    return after;
  }
  std::shared_ptr<ddp::RoutedLinear> fc1, fc2;
  torch::Tensor region_mask, replicated_mask;
};

}  // namespace

TEST_CASE("dropout masks agree across a tensor group where activations are replicated and differ inside a "
          "column-to-row region (Megatron's RNG tracker)",
          "[parallel][tensor]") {
  std::vector<std::shared_ptr<RegionChain>> chains;
  for (int r = 0; r < kParts; ++r) {
    torch::manual_seed(1);
    chains.push_back(std::make_shared<RegionChain>());
  }
  auto x = torch::randn({4, 8});
  std::vector<torch::Tensor> region(kParts), replicated(kParts);
  auto errors = ddp::test::run_ranks(kParts, [&](int rank, const ddp::Communicator& group) {
    ddp::RankGeneratorScope own;  // each thread a rank's generator, seeded alike as ranks are
    ddp::cpu_generator().set_current_seed(11);
    auto& chain = *chains[static_cast<std::size_t>(rank)];
    std::vector<torch::Tensor> parameters = chain.parameters();
    ddp::TensorShards shards(chain, {{"fc1", "colwise"}, {"fc2", "rowwise"}}, parameters, group);
    torch::NoGradGuard off;
    chain.forward(x);
    region[static_cast<std::size_t>(rank)] = chain.region_mask;
    replicated[static_cast<std::size_t>(rank)] = chain.replicated_mask;
  });
  for (std::size_t r = 0; r < errors.size(); ++r) {
    INFO("rank " << r << ": " << errors[r]);
    REQUIRE(errors[r].empty());
  }
  REQUIRE(region[0].sizes() == torch::IntArrayRef({4, 32}));  // each rank's half of the 64 hidden units
  CHECK_FALSE(torch::equal(region[0], region[1]));
  CHECK(torch::equal(replicated[0], replicated[1]));
  CHECK(replicated[0].any().item<bool>());
}

TEST_CASE("with dropout, a GPT split over 2 ranks keeps its replicated parameters' gradients equal on both, step "
          "after step, with and without sequence parallelism",
          "[parallel][tensor]") {
  const bool sequence_parallel = GENERATE(false, true);
  INFO("sequence parallel " << sequence_parallel);
  ddp::GptOptions o = small_gpt();
  o.dropout = 0.2;
  std::vector<std::shared_ptr<ddp::Gpt>> models;
  for (int r = 0; r < kParts; ++r) {
    torch::manual_seed(5);
    models.push_back(std::make_shared<ddp::Gpt>(o));
  }
  torch::manual_seed(6);
  auto ids = torch::randint(0, kVocab, {3, 16}), targets = torch::randint(0, kVocab, {3, 16});
  std::vector<std::map<std::string, torch::Tensor>> replicated_grads(kParts);
  auto errors = ddp::test::run_ranks(kParts, [&](int rank, const ddp::Communicator& group) {
    ddp::RankGeneratorScope own;
    ddp::cpu_generator().set_current_seed(11);
    auto& model = *models[static_cast<std::size_t>(rank)];
    std::vector<torch::Tensor> parameters;
    auto named = unique_parameters(model);
    for (const auto& [name, p] : named) parameters.push_back(p);
    std::vector<torch::Tensor> before_split = model.blocks().front().parameters;
    ddp::TensorShards shards(model, ddp::builtin_tensor_plan(gpt_config(), kParts), parameters, group,
                             {sequence_parallel, before_split});
    if (sequence_parallel) split_after_first_block(model, shards);
    model.train();
    ddp::Placements placements;
    for (std::size_t i = 0; i < parameters.size(); ++i)
      placements.held.push_back({ddp::OwnedRange{i, 0, parameters[i].detach(), parameters[i], {}}});
    for (int step = 0; step < 2; ++step) {  // the second forward starts where the first left the generators
      for (auto& p : parameters) p.mutable_grad() = torch::Tensor();
      auto logits = model.forward(ids);
      ddp::vocab_parallel_cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}),
                                        shards.output_first(), group)
          .mean()
          .backward();
      shards.sum_sequence_gradients(placements);
    }
    for (std::size_t i = 0; i < named.size(); ++i)
      if (shards.boxes(i).empty()) replicated_grads[static_cast<std::size_t>(rank)][named[i].first] = named[i].second.grad();
  });
  for (std::size_t r = 0; r < errors.size(); ++r) {
    INFO("rank " << r << ": " << errors[r]);
    REQUIRE(errors[r].empty());
  }
  REQUIRE(replicated_grads[0].size() == 15);  // wpe, ln_f's two; per block two LayerNorms' four, two c_proj biases
  for (const auto& [name, grad] : replicated_grads[0]) {
    INFO(name);
    CHECK(torch::equal(grad, replicated_grads[1].at(name)));
  }
}

TEST_CASE("with sequence parallelism, the GPT split over 2 ranks gives the whole model's logits, loss and gradients",
          "[parallel][tensor]") {
  WholeRun run = whole_run();
  const auto& [whole, ids, targets, logits, loss, reference] = run;

  std::vector<std::shared_ptr<ddp::Gpt>> models{seeded_gpt(), seeded_gpt()};
  std::vector<torch::Tensor> losses(kParts), logit_slices(kParts);
  std::vector<std::vector<torch::Tensor>> grads(kParts);
  std::vector<std::vector<std::vector<ddp::TensorBox>>> boxes(kParts);
  auto errors = ddp::test::run_ranks(kParts, [&](int rank, const ddp::Communicator& group) {
    auto& model = *models[static_cast<std::size_t>(rank)];
    std::vector<torch::Tensor> parameters;
    for (const auto& [name, p] : unique_parameters(model)) parameters.push_back(p);
    ddp::SequenceParallel sequence{true, model.blocks().front().parameters};
    ddp::TensorShards shards(model, ddp::builtin_tensor_plan(gpt_config(), kParts), parameters, group, sequence);
    split_after_first_block(model, shards);
    auto local = model.forward(ids);
    logit_slices[static_cast<std::size_t>(rank)] = local.detach();
    auto l = ddp::vocab_parallel_cross_entropy(local.reshape({-1, local.size(-1)}), targets.reshape({-1}),
                                               shards.output_first(), group)
                 .mean();
    l.backward();
    losses[static_cast<std::size_t>(rank)] = l.detach();
    ddp::Placements placements;
    for (std::size_t i = 0; i < parameters.size(); ++i)
      placements.held.push_back({ddp::OwnedRange{i, 0, parameters[i].detach(), parameters[i], {}}});
    shards.sum_sequence_gradients(placements);
    for (std::size_t i = 0; i < parameters.size(); ++i) {
      grads[static_cast<std::size_t>(rank)].push_back(parameters[i].grad());
      boxes[static_cast<std::size_t>(rank)].push_back(shards.boxes(i));
    }
  });
  for (std::size_t r = 0; r < errors.size(); ++r) {
    INFO("rank " << r << ": " << errors[r]);
    REQUIRE(errors[r].empty());
  }
  for (int rank = 0; rank < kParts; ++rank) {
    INFO("rank " << rank);
    const auto r = static_cast<std::size_t>(rank);
    CHECK((logit_slices[r] - logits.narrow(2, rank * kVocab / kParts, kVocab / kParts)).abs().max().item<double>() < 1e-5);
    CHECK(losses[r].item<double>() == Approx(loss.item<double>()).margin(1e-6));
    for (std::size_t i = 0; i < reference.size(); ++i) {
      INFO(reference[i].first);
      auto expected = in_boxes(reference[i].second.grad(), boxes[r][i]);
      CHECK((grads[r][i].reshape(-1) - expected.reshape(-1)).abs().max().item<double>() < 1e-5);
    }
  }
}

}  // namespace DDP_TEST_FILE
