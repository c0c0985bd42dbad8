// train.chunked_loss by real ddprun runs (Note [Chunked cross-entropy]): the GPT at nanoGPT's
// vocabulary of 50,304 and a Llama train to the same weights with the head and the loss chunked as
// without, holding less activation memory (printed); what it cannot chunk says so.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>

#include "support/metric_values.h"
#include "support/python_fixtures.h"
#include "support/subprocess.h"
#include "support/token_files.h"
#include "support/weights.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp::test;
using Catch::Contains;

namespace {

namespace fs = std::filesystem;

// A one-layer GPT over the license's bytes with nanoGPT's padded vocabulary: the logits of a step's
// 512 tokens are 98 MiB in float32, its weights 7 MiB.
std::string gpt_config(const TempDir& dir) {
  std::string path = dir.file("gpt.yaml");
  std::ofstream(path) << text_data_section(dir)
                      << "model: {name: gpt, n_layer: 1, n_head: 2, n_embd: 32, block_size: 64, vocab_size: 50304, "
                         "dropout: 0}\n"
                      << "optim: {name: adamw, lr: 0.003, weight_decay: 0.1}\n"
                      << "train: {task: causal_lm, epochs: 1, batch_size: 8, clip_grad_norm: 1.0, max_steps: 10, "
                         "label_smoothing: 0.1}\n"
                      << "eval: {every_epochs: 0, at_start: false, batch_size: 64, max_batches: 2}\n"
                      << "checkpoint: {every_epochs: 0}\n";
  return path;
}

// On a free port (--standalone): tests run side by side.
CommandResult train(const std::string& config, const std::vector<std::string>& sets, int nproc = 1) {
  std::string command = "OMP_NUM_THREADS=1 " + bin("ddprun") + " --standalone --nproc-per-node " +
                        std::to_string(nproc) + " " + config;
  for (const auto& s : sets) command += " --set '" + s + "'";
  return run_shell(command, std::chrono::seconds(300));
}

}  // namespace

TEST_CASE("train.chunked_loss: the GPT at vocabulary 50304 and a Llama train to the same weights as without it, and "
          "the GPT's step holds less activation memory (printed)",
          "[loss][gpt]") {
  TempDir dir;
  const std::string config = gpt_config(dir);
  auto run = [&](const std::string& name, std::vector<std::string> sets, int nproc = 1) {
    sets.push_back("run.output_dir=" + dir.file(name));
    auto r = train(config, sets, nproc);
    INFO(name << "\n" << r.out << r.err);
    REQUIRE(r.exit_code == 0);
    return r;
  };
  auto automatic = run("auto", {});
  CHECK_THAT(automatic.out, Contains("train.chunked_loss auto: lm_head and the cross-entropy run 166 tokens at a time, "
                                     "the logits of a 50304-token vocabulary never held whole"));
  auto plain = run("off", {"train.chunked_loss=off"});
  CHECK_THAT(plain.out, !Contains("train.chunked_loss"));
  const double chunked_mib = metric_value(dir.file("auto/metrics.jsonl"), "activation_mib_max");
  const double plain_mib = metric_value(dir.file("off/metrics.jsonl"), "activation_mib_max");
  std::cout << "GPT at vocabulary 50304, 512 tokens a step: peak activation memory " << chunked_mib
            << " MiB with train.chunked_loss, " << plain_mib << " MiB without\n";
  CHECK(chunked_mib < 0.5 * plain_mib);
  // Each step's loss and gradients agree within 1e-6 (tests/task); over 10 AdamW steps the rounding
  // of 50,304-term sums, which Adam's normalised steps carry into rarely seen rows, grows to 2e-5.
  CHECK(largest_difference(dir.file("off/model.pt"), dir.file("auto/model.pt")) < 1e-4);
  CHECK(metric_value(dir.file("auto/metrics.jsonl"), "eval_loss") ==
        Approx(metric_value(dir.file("off/metrics.jsonl"), "eval_loss")).margin(1e-5));

  // In 2 pipeline stages the last one's loss is chunked too; under ZeRO-3, which frees the head
  // between blocks, auto leaves it off.
  CHECK_THAT(run("pipeline", {"dist.pipeline=2", "train.global_batch_size=8"}, 2).out,
             Contains("train.chunked_loss auto:"));
  CHECK(largest_difference(dir.file("off/model.pt"), dir.file("pipeline/model.pt")) < 1e-4);
  CHECK_THAT(run("zero3", {"dist.shard=parameters"}, 2).out, !Contains("train.chunked_loss"));

  // A Llama at a byte vocabulary, chunked on purpose (auto leaves it off), tied and untied.
  for (const std::string tied : {"false", "true"}) {
    const std::vector<std::string> llama{"model.name=llama", "model.dim=32", "model.n_head=4", "model.n_kv_heads=2",
                                         "model.ffn_dim=64", "model.vocab_size=256", "model.tie_embeddings=" + tied};
    auto with = llama, without = llama;
    with.push_back("train.chunked_loss=on");
    without.push_back("train.chunked_loss=auto");
    CHECK_THAT(run("llama_on_" + tied, with).out, Contains("train.chunked_loss on:"));
    CHECK_THAT(run("llama_auto_" + tied, without).out, !Contains("train.chunked_loss"));
    CHECK(largest_difference(dir.file("llama_auto_" + tied + "/model.pt"), dir.file("llama_on_" + tied + "/model.pt")) <
          1e-5);
  }
}

TEST_CASE("train.chunked_loss on where it cannot be had: one line naming the key, exit 2", "[loss][gpt]") {
  TempDir dir;
  const std::string config = gpt_config(dir);
  auto fails = [&](const std::vector<std::string>& sets, const std::string& message) {
    std::vector<std::string> all{"run.output_dir=" + dir.file("out"), "train.chunked_loss=on"};
    all.insert(all.end(), sets.begin(), sets.end());
    auto r = train(config, all);
    INFO(r.out << r.err);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains(message));
    CHECK(!fs::exists(dir.file("out/model.pt")));
  };
  fails({"model.name=torchscript", "model.path=" + python_fixture("transformer.pt"), "model.block_size=32"},
        "train.chunked_loss: on needs the model's output layer to be a Linear named lm_head (gpt, llama, or a "
        "TorchScript module's nn.Linear of that name); model.path " + python_fixture("transformer.pt") +
        "'s output width (its vocabulary) has none: use auto or off");
  fails({"dist.tensor=2"}, "train.chunked_loss: on does not combine with dist.tensor's loss-parallel cross-entropy");
  fails({"dist.shard=parameters"}, "train.chunked_loss: on does not combine with dist.shard parameters yet");
  fails({"train.task=classification"}, "train.chunked_loss: is for train.task causal_lm, not classification");
}

}  // namespace DDP_TEST_FILE
