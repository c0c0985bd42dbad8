// Language models by real ddprun processes: a GPT on token shards this file writes byte by byte
// from llm.c's format description (the text of a Debian license, so no package's corpus is needed),
// world-size equivalence under AdamW, nanoGPT's Python structure loading model.pt strictly and
// scoring what ddprun reported, exact resume after a SIGKILL, every bad token file's one line, and
// text from ddp-generate.
#include <sys/stat.h>
#include <torch/torch.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include "ddp/model/safetensors.h"
#include "ddp/model/state_dict_file.h"
#include "support/gpu.h"
#include "support/metric_values.h"
#include "support/python_fixtures.h"
#include "support/subprocess.h"
#include "support/token_files.h"
#include "support/weights.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp::test;
using Catch::Contains;
using Catch::StartsWith;

namespace {

namespace fs = std::filesystem;

// A config training a small GPT on shards in `dir`: train_*.bin (two shards) and val.bin.
std::string write_gpt_config(const TempDir& dir, const std::string& extra = "") {
  auto [train, val] = text_tokens();
  auto half = train.begin() + static_cast<std::ptrdiff_t>(train.size() / 2);
  write_file(dir.file("train_000.bin"), llmc_shard({train.begin(), half}));
  write_file(dir.file("train_001.bin"), llmc_shard({half, train.end()}));
  write_file(dir.file("val.bin"), llmc_shard(val));
  std::string path = dir.file("config.yaml");
  std::ofstream(path) << "run: {output_dir: " << dir.file("out") << "}\n"
                      << "data: {dataset: tokens, path: '" << dir.file("train_*.bin") << "', eval_path: "
                      << dir.file("val.bin") << "}\n"
                      << "model: {name: gpt, n_layer: 2, n_head: 2, n_embd: 32, block_size: 32, vocab_size: 256, "
                         "bias: false, dropout: 0}\n"
                      << "optim: {name: adamw, lr: 0.003, weight_decay: 0.1, decay_params: matrices, beta2: 0.99}\n"
                      << "schedule: {name: cosine, warmup_steps: 10}\n"
                      << "train: {task: causal_lm, epochs: 1, batch_size: 16, log_every: 10, clip_grad_norm: 1.0}\n"
                      << "eval: {every_epochs: 0, at_start: false, batch_size: 64}\n"
                      << "checkpoint: {every_epochs: 0}\n"
                      << extra;
  return path;
}

CommandResult ddprun(int nproc, const std::string& config, const std::vector<std::string>& sets) {
  std::string command =
      "OMP_NUM_THREADS=1 " + bin("ddprun") + " --standalone --nproc-per-node " + std::to_string(nproc) + " " + config;
  for (const auto& s : sets) command += " --set '" + s + "'";
  return run_shell(command, std::chrono::seconds(240));
}

// The eval loss a Python script (tests/support/eval_*.py) scores a run directory's model at.
double python_eval_loss(const std::string& script, const std::string& run_dir) {
  auto python = run_command({"/usr/bin/python3", std::string(DDP_SOURCE_DIR) + "/tests/support/" + script, run_dir},
                            std::chrono::seconds(120));
  INFO(python.out << python.err);
  REQUIRE(python.exit_code == 0);
  std::smatch match;
  REQUIRE(std::regex_search(python.out, match, std::regex("eval_loss ([0-9.]+)")));
  return std::stod(match[1]);
}

}  // namespace

TEST_CASE("a GPT at world 2 batch 8 matches world 1 batch 16 within 1e-5 after 30 AdamW steps", "[gpt]") {
  TempDir one, two;
  auto sets = [](const TempDir& dir, int batch) {
    return std::vector<std::string>{"train.max_steps=30", "train.batch_size=" + std::to_string(batch), "train.epochs=5",
                                    "data.eval_split=none", "run.output_dir=" + dir.file("out")};
  };
  auto a = ddprun(1, write_gpt_config(one), sets(one, 16));
  INFO(a.out << a.err);
  REQUIRE(a.exit_code == 0);
  auto b = ddprun(2, write_gpt_config(two), sets(two, 8));
  INFO(b.out << b.err);
  REQUIRE(b.exit_code == 0);
  auto x = load_weights(one.file("out/model.pt")), y = load_weights(two.file("out/model.pt"));
  REQUIRE(x.count("lm_head.weight"));
  REQUIRE(x.count("transformer.h.1.mlp.c_proj.weight"));
  double worst = 0;
  for (const auto& [name, tensor] : x) worst = std::max(worst, (tensor - y.at(name)).abs().max().item<double>());
  CHECK(worst < 1e-5);
  CHECK(torch::equal(x.at("lm_head.weight"), x.at("transformer.wte.weight")));  // tied
  // Tokens/s is logged with samples/s: 16 windows of 32 tokens a step.
  CHECK(metric_value(two.file("out/metrics.jsonl"), "tokens_per_s") > 0);
}

TEST_CASE("a Llama at world 2 (batch 8, under dist.shard parameters, in 2 pipeline stages, each also with activation "
          "checkpointing) matches world 1 batch 16 within 1e-5 after 30 AdamW steps", "[llama]") {
  auto sets = [](const TempDir& dir, std::vector<std::string> more) {
    std::vector<std::string> all = {"model.name=llama", "model.dim=32", "model.n_kv_heads=1", "model.multiple_of=16",
                                    "model.rope_theta=500000", "train.max_steps=30", "train.global_batch_size=16",
                                    "train.epochs=5", "data.eval_split=none", "run.output_dir=" + dir.file("out")};
    all.insert(all.end(), more.begin(), more.end());
    return all;
  };
  TempDir one;
  auto a = ddprun(1, write_gpt_config(one), sets(one, {}));
  INFO(a.out << a.err);
  REQUIRE(a.exit_code == 0);
  auto x = load_weights(one.file("out/model.pt"));
  REQUIRE(x.count("model.layers.1.self_attn.k_proj.weight"));
  CHECK(x.at("model.layers.1.self_attn.k_proj.weight").size(0) == 16);  // one key/value head of 16
  CHECK(x.at("model.layers.1.mlp.gate_proj.weight").size(0) == 96);     // 8 · 32 / 3, rounded up to 16s
  // Activation checkpointing composes: the recomputed blocks are sharded or cut into stages as any others.
  for (const auto& layout : std::vector<std::vector<std::string>>{
           {},
           {"dist.shard=parameters"},
           {"dist.pipeline=2"},
           {"dist.shard=parameters", "model.activation_checkpointing=full"},
           {"dist.pipeline=2", "model.activation_checkpointing=every_2"}}) {
    TempDir two;
    auto b = ddprun(2, write_gpt_config(two), sets(two, layout));
    INFO((layout.empty() ? "replicated" : layout.front() + (layout.size() > 1 ? " " + layout.back() : "")) << "\n"
                                                                                                     << b.out << b.err);
    REQUIRE(b.exit_code == 0);
    if (layout.size() > 1) CHECK_THAT(b.out + b.err, Contains("model.activation_checkpointing " + layout.back().substr(31)));
    auto y = load_weights(two.file("out/model.pt"));
    REQUIRE(y.size() == x.size());
    double worst = 0;
    for (const auto& [name, tensor] : x) worst = std::max(worst, (tensor - y.at(name)).abs().max().item<double>());
    CHECK(worst < 1e-5);
  }
  // But not with a weight tied across the stages and stage 3 sharding: refused at the start, in one
  // line (it failed in the first backward with LibTorch's "setStorage: ... out of bounds").
  TempDir tied;
  auto refused = ddprun(2, write_gpt_config(tied), sets(tied, {"model.tie_embeddings=true", "dist.pipeline=2",
                                                               "dist.shard=parameters",
                                                               "model.activation_checkpointing=full"}));
  INFO(refused.out << refused.err);
  CHECK(refused.exit_code == 2);
  CHECK_THAT(refused.err, Contains("model.activation_checkpointing full with dist.pipeline and dist.shard parameters "
                                   "cannot run a model whose embedding and head share a weight across stages"));
}

TEST_CASE("nanoGPT's Python structure loads model.pt strictly and scores the eval loss ddprun reported",
          "[gpt][python]") {
  TempDir dir;
  // Biases on here (the other tests run without): both LayerNorm forms load.
  auto r = ddprun(2, write_gpt_config(dir), {"model.bias=true", "train.epochs=40", "train.max_steps=1000"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  double loss = metric_value(dir.file("out/metrics.jsonl"), "eval_loss");
  REQUIRE(loss > 0);
  REQUIRE(loss < 3.0);  // it learned: a uniform guess over bytes is ln 256 = 5.55
  CHECK(metric_value(dir.file("out/metrics.jsonl"), "eval_perplexity") == Approx(std::exp(loss)).epsilon(1e-9));
  CHECK(metric_value(dir.file("out/metrics.jsonl"), "eval_bits_per_byte") == Approx(loss / std::log(2.0)).epsilon(1e-9));
  CHECK(std::abs(python_eval_loss("eval_gpt.py", dir.file("out")) - loss) < 1e-4);
  CHECK(std::abs(python_eval_loss("eval_gpt2.py", dir.file("out")) - loss) < 1e-4);  // GPT-2's layout, biases and all

  SECTION("and ddp-generate continues a prompt with words of the text") {
    auto generate = [&](const std::string& options) {
      return run_shell(bin("ddp-generate") + " " + dir.file("out") + " " + options, std::chrono::seconds(60));
    };
    auto text = generate("--prompt 'the Program' --tokens 300 --seed 7");
    INFO(text.out << text.err);
    REQUIRE(text.exit_code == 0);
    CHECK_THAT(text.out, Contains("the Program"));
    CHECK(std::regex_search(text.out.substr(11), std::regex(" (the|of|to|and|or) ")));
    CHECK(generate("--prompt 'the Program' --tokens 300 --seed 7").out == text.out);  // seeded
    CHECK(generate("--prompt 'the Program' --tokens 300 --seed 8").out != text.out);

    auto ids = generate("--ids --prompt-ids '116 104' --tokens 5 --temperature 0");
    CHECK(ids.exit_code == 0);
    CHECK(std::count(ids.out.begin(), ids.out.end(), '\n') == 5);

    std::string wider = std::regex_replace(read_file(dir.file("out/config.yaml")), std::regex("n_embd: 32"), "n_embd: 64");
    write_file(dir.file("wider.yaml"), wider);
    for (const auto& [ids, expected] : std::vector<std::pair<std::string, std::string>>{
             {"'1 x 2'", "--prompt-ids: expected token ids separated by spaces, got 'x'"},
             {"'1 256'", "--prompt-ids: 256 is outside the model's vocabulary (ids 0 to 255)"},
             {"''", "--prompt-ids: no token ids given"}}) {
      auto bad = generate("--prompt-ids " + ids + " --tokens 3");
      CHECK(bad.exit_code == 2);
      CHECK(bad.out.empty());  // nothing printed before the refusal
      CHECK_THAT(bad.err, Contains(expected));
    }
    for (const auto& [options, expected] : std::vector<std::pair<std::string, std::string>>{
             {"--prompt x --prompt-ids 1", "--prompt excludes --prompt-ids"},       // one was ignored
             {"--temperature nan", "--temperature: expected a number, got 'nan'"},  // sampled at 1
             {"--temperature -1", "--temperature: expected a number in [0, 100], got -1"},
             {"--tokenizer ''", "--tokenizer: expected a value, got an empty one"},  // was: the default's
             {"--seed 18446744073709551615",  // past run.seed's int64: out of range, not "no integer"
              "--seed: expected an integer in [0, 9223372036854775807], got 18446744073709551615"}}) {
      auto bad = generate(options + " --tokens 3");
      CHECK(bad.exit_code == 2);
      CHECK(bad.out.empty());
      CHECK_THAT(bad.err, Contains(expected));
    }

    auto mismatch = generate("--config " + dir.file("wider.yaml") + " --tokens 3");
    CHECK(mismatch.exit_code == 2);
    CHECK_THAT(mismatch.err, Contains("wrong shapes transformer.wte.weight (file [256, 32], model [256, 64])") &&
                                 Contains("is " + dir.file("out/model.pt") + " from the run of"));
    std::string words = std::regex_replace(read_file(dir.file("out/config.yaml")), std::regex("vocab_size: 256"),
                                           "vocab_size: 50304");
    write_file(dir.file("words.yaml"), words);
    // Another vocabulary than model.pt's: the shapes are named before any tokenizer is looked for
    // (a Llama's run with no tokenizer beside it is told it needs one, in the test below).
    auto not_bytes = generate("--config " + dir.file("words.yaml") + " --tokens 3");
    CHECK(not_bytes.exit_code == 2);
    CHECK_THAT(not_bytes.err, Contains("wrong shapes transformer.wte.weight (file [256, 32], model [50304, 32])"));
    // Another n_head, the same shapes: the weights load, so the run's config.yaml must refuse it.
    std::string heads = std::regex_replace(read_file(dir.file("out/config.yaml")), std::regex("n_head: 2"), "n_head: 4");
    write_file(dir.file("heads.yaml"), heads);
    auto other_heads = generate("--config " + dir.file("heads.yaml") + " --tokens 3");
    CHECK(other_heads.exit_code == 2);
    CHECK(other_heads.out.empty());
    CHECK_THAT(other_heads.err, Contains("--config: " + dir.file("heads.yaml") + " builds another model than " +
                                         dir.file("out/model.pt") + " was trained as (model.n_head 2 → 4, against " +
                                         dir.file("out/config.yaml") + ")"));
    write_file(dir.file("empty.yaml"), "");  // the default model, which is no language model
    auto empty = generate("--config " + dir.file("empty.yaml") + " --tokens 3");
    CHECK(empty.exit_code == 2);
    CHECK_THAT(empty.err, Contains(dir.file("empty.yaml") + ": model.name is convnet (the default: the config sets no "
                                   "model.name); ddp-generate samples from causal language models (gpt, llama)"));
    write_file(dir.file("same.yaml"), read_file(dir.file("out/config.yaml")));
    CHECK(generate("--config " + dir.file("same.yaml") + " --tokens 3").exit_code == 0);
    // A copy of the run cut short in its config.yaml: said as that, wherever the cut fell (in a
    // key's value, between sections, in the last key's name), not as what the cut left wrong.
    const std::string whole = read_file(dir.file("out/config.yaml"));
    std::filesystem::copy(dir.file("out"), dir.file("copy"), std::filesystem::copy_options::recursive);
    for (std::size_t keep :
         {whole.find("data_replicate:") + 15, whole.find("\nmodel:") + 1, whole.rfind("log_every_s") + 5}) {
      write_file(dir.file("copy/config.yaml"), whole.substr(0, keep));
      auto cut = run_shell(bin("ddp-generate") + " " + dir.file("copy") + " --tokens 3", std::chrono::seconds(30));
      INFO(whole.substr(0, keep));
      CHECK(cut.exit_code == 2);
      CHECK_THAT(cut.err, Contains(dir.file("copy/config.yaml") + " is cut short: a run writes all ") &&
                              Contains("restore it from a copy of the run directory"));
    }
    // The same beginning, trimmed to be another run's config outside a run directory, is a config.
    write_file(dir.file("trimmed.yaml"), whole.substr(0, whole.find("\ncheckpoint:") + 1));
    CHECK(generate("--config " + dir.file("trimmed.yaml") + " --tokens 3").exit_code == 0);
    auto missing = run_shell(bin("ddp-generate") + " " + dir.file("nowhere"), std::chrono::seconds(30));
    CHECK(missing.exit_code == 2);
    CHECK_THAT(missing.err, Contains(dir.file("nowhere") + ": no such file"));
    // A training checkpoint (beside its manifest), or a shard of one: said as such, with the way to
    // a model.pt, not as a torch.save file of another object "from another run".
    std::filesystem::create_directories(dir.file("ck"));
    write_file(dir.file("ck/step_0000000005.json"), "{}");
    // Without --config too: the checkpoint named, not its directory's missing config.yaml.
    for (const std::string name : {"step_0000000005.pt", "step_0000000005.shard-1-of-2.pt"}) {
      std::filesystem::copy_file(dir.file("out/model.pt"), dir.file("ck/" + name));
      auto checkpoint =
          run_shell(bin("ddp-generate") + " " + dir.file("ck/" + name) +
                        (name.find("shard") == std::string::npos ? "" : " --config " + dir.file("out/config.yaml")) +
                        " --tokens 3",
                    std::chrono::seconds(30));
      CHECK(checkpoint.exit_code == 2);
      CHECK_THAT(checkpoint.err, Contains(name + " is a training checkpoint, not a model.pt: `ddp-export RUN_DIR "
                                                 "--checkpoint ") &&
                                     !Contains("from the run of"));
    }
    // ddp-export's --checkpoint given the run's model.pt, which has no manifest: said as the end's weights.
    auto end = run_shell(bin("ddp-export") + " " + dir.file("out") + " --checkpoint " + dir.file("out/model.pt") +
                             " -o " + dir.file("export"),
                         std::chrono::seconds(60));
    CHECK(end.exit_code == 2);
    CHECK_THAT(end.err, Contains("--checkpoint: " + dir.file("out/model.pt") +
                                 " is a run's model.pt, its end weights, "
                                 "not one of its checkpoints: the run's directory holds them exported already"));
    CHECK_FALSE(std::filesystem::exists(dir.file("export")));
  }
}

TEST_CASE("a Llama's exported model.safetensors and config.json load strictly into an independent PyTorch Llama, "
          "which scores ddprun's eval loss within 1e-4, and model.init_from that directory, sharded, continues "
          "from it", "[llama][python]") {
  TempDir dir;
  const std::vector<std::string> llama = {"model.name=llama", "model.dim=32", "model.n_kv_heads=1",
                                          "model.multiple_of=16", "model.rope_scaling=llama3",
                                          "model.rope_original_context=16", "model.tie_embeddings=false"};
  auto sets = llama;
  sets.insert(sets.end(), {"train.epochs=3", "train.max_steps=60"});
  auto trained = ddprun(2, write_gpt_config(dir), sets);
  INFO(trained.out << trained.err);
  REQUIRE(trained.exit_code == 0);
  const double loss = metric_value(dir.file("out/metrics.jsonl"), "eval_loss");
  CHECK(std::abs(python_eval_loss("eval_llama.py", dir.file("out")) - loss) < 1e-4);
  CHECK_THAT(read_file(dir.file("out/config.json")), Contains("\"num_key_value_heads\": 1") &&
                                                          Contains("\"rope_type\": \"llama3\""));

  // As a hub's larger models come: the weights in two shards and an index, beside config.json.
  TempDir hub;
  {
    ddp::SafetensorsFile whole(dir.file("out/model.safetensors"));
    std::vector<std::pair<std::string, torch::Tensor>> first, second;
    std::string map;
    for (const auto& entry : whole.entries()) {
      bool later = entry.name.rfind("model.layers.1.", 0) == 0 || entry.name.rfind("lm_head", 0) == 0;
      (later ? second : first).emplace_back(entry.name, whole.read(entry));
      map += std::string(map.empty() ? "" : ", ") + "\"" + entry.name + "\": \"model-0000" + (later ? "2" : "1") +
             "-of-00002.safetensors\"";
    }
    ddp::write_safetensors(hub.file("model-00001-of-00002.safetensors"), first);
    ddp::write_safetensors(hub.file("model-00002-of-00002.safetensors"), second);
    write_file(hub.file("model.safetensors.index.json"), "{\"metadata\": {}, \"weight_map\": {" + map + "}}");
    // With what a hub's config.json has besides the architecture: token ids, the context it was made for.
    std::string hub_config = read_file(dir.file("out/config.json"));
    hub_config.replace(hub_config.find('{'), 1, R"({"bos_token_id": 128000, "eos_token_id": [128001, 128009], )");
    const std::string trained_at = "\"max_position_embeddings\": 32";
    REQUIRE(hub_config.find(trained_at) != std::string::npos);
    hub_config.replace(hub_config.find(trained_at), trained_at.size(), "\"max_position_embeddings\": 131072");
    write_file(hub.file("config.json"), hub_config);
  }
  // The YAML names only what it trains on: config.json gives the architecture.
  auto again = [&](const std::string& name, const std::vector<std::string>& more, int world = 1) {
    std::vector<std::string> sets = {"model.name=llama",  "optim.lr=0.00001",   "schedule.name=constant",
                                     "train.max_steps=3", "eval.at_start=true", "run.output_dir=" + dir.file(name)};
    sets.insert(sets.end(), more.begin(), more.end());
    return ddprun(world, write_gpt_config(dir), sets);
  };
  auto imported = again("imported", {"model.init_from=" + hub.path()});
  INFO(imported.out << imported.err);
  REQUIRE(imported.exit_code == 0);
  // Its config.json keeps the hub's token ids and context (Llama's rotary positions reach past the
  // 32 trained at), at the run's end and in an export of its checkpoint.
  auto exported = run_command({bin("ddp-export"), dir.file("imported"), "-o", dir.file("imported_export")},
                              std::chrono::seconds(120));
  INFO(exported.out << exported.err);
  REQUIRE(exported.exit_code == 0);
  for (const std::string written : {"imported/config.json", "imported_export/config.json"}) {
    INFO(written);
    const std::string text = read_file(dir.file(written));
    CHECK_THAT(text, Contains("\"bos_token_id\": 128000") && Contains("\"max_position_embeddings\": 131072") &&
                         Contains("\"rope_type\": \"llama3\""));
    CHECK_THAT(text, Contains("\"eos_token_id\": [\n    128001,\n    128009\n  ]"));
  }
  auto fresh = again("fresh", {"model.n_kv_heads=1", "model.dim=32"});
  REQUIRE(fresh.exit_code == 0);
  const double start = metric_value(dir.file("imported/metrics.jsonl"), "eval_loss", /*last=*/false);
  const double random = metric_value(dir.file("fresh/metrics.jsonl"), "eval_loss", /*last=*/false);
  std::printf("eval loss at the first step: from the imported model %.6f (it ended its run at %.6f), from a random "
              "model %.6f\n", start, loss, random);
  CHECK(std::abs(start - loss) < 1e-5);
  CHECK(random > loss + 1);
  CHECK(std::abs(metric_value(dir.file("imported/metrics.jsonl"), "eval_loss") - loss) < 0.05);
  // Where each rank keeps part of the model it reads only that part from the shards (Note [Deferred
  // initialisation]), and starts from the same model.
  for (const std::string layout : {"shard=parameters", "pipeline=2"}) {
    const std::string out = "part_" + layout.substr(0, layout.find('='));
    auto part = again(out, {"model.init_from=" + hub.path(), "dist." + layout}, 2);
    INFO(layout << "\n" << part.out << part.err);
    REQUIRE(part.exit_code == 0);
    CHECK(std::abs(metric_value(dir.file(out + "/metrics.jsonl"), "eval_loss", /*last=*/false) - loss) < 1e-5);
  }

  // A key the YAML sets to another value than config.json's is named, with both values.
  auto conflict = again("conflict", {"model.init_from=" + hub.path(), "model.n_kv_heads=2"});
  CHECK(conflict.exit_code == 2);
  CHECK_THAT(conflict.err, Contains("model.n_kv_heads: 2 here, but " + hub.path() +
                                    "/config.json (model.init_from) makes it 1"));
  // Note [model.init_from gone]: a run from the hub that saves checkpoints, and the same run, longer.
  const std::string from_hub = "model.init_from=" + hub.path();
  auto whole = again("whole", {from_hub, "checkpoint.every_steps=2", "train.max_steps=5"});
  auto interrupted = again("interrupted", {from_hub, "checkpoint.every_steps=2"});
  REQUIRE(whole.exit_code == 0);
  REQUIRE(interrupted.exit_code == 0);
  // A shard missing from the hub's directory: named, with the tensor that needed it.
  std::filesystem::remove(hub.file("model-00002-of-00002.safetensors"));
  auto lost = again("lost", {"model.init_from=" + hub.path()});
  CHECK(lost.exit_code == 2);
  CHECK_THAT(lost.err, Contains("model.safetensors.index.json: weight_map.lm_head.weight is in "
                                "model-00002-of-00002.safetensors, which is not in " + hub.path()));
  // The directory gone, a run from it goes on from its own checkpoints, the model keys config.json
  // gave taken from the run's config.yaml, to the same losses as the run that never stopped.
  std::filesystem::remove_all(hub.path());
  auto lengthened = again("interrupted", {from_hub, "checkpoint.every_steps=2", "train.max_steps=5"});
  INFO(lengthened.out << lengthened.err);
  REQUIRE(lengthened.exit_code == 0);
  CHECK_THAT(lengthened.out + lengthened.err, Contains("resum"));
  CHECK(metric_value(dir.file("interrupted/metrics.jsonl"), "eval_loss") ==
        metric_value(dir.file("whole/metrics.jsonl"), "eval_loss"));
  CHECK_THAT(read_file(dir.file("interrupted/config.json")), Contains("\"bos_token_id\": 128000"));
  // Killed before its first end, a run has no config.json of its own to keep the hub's other keys:
  // said, as the end's config.json will lack them (was: without a word).
  std::filesystem::copy(dir.file("interrupted"), dir.file("no_end"), std::filesystem::copy_options::recursive);
  std::filesystem::remove(dir.file("no_end/config.json"));
  auto no_end = again("no_end", {from_hub, "checkpoint.every_steps=2", "train.max_steps=7"});
  INFO(no_end.out << no_end.err);
  CHECK(no_end.exit_code == 0);
  CHECK_THAT(no_end.out + no_end.err, Contains(dir.file("no_end") + " has no config.json of its own yet"));
  // A finished run says so; one that has no checkpoint to resume from, or never ran, is refused naming it.
  auto finished = again("imported", {from_hub});
  CHECK(finished.exit_code == 0);
  std::filesystem::remove_all(dir.file("interrupted/checkpoints"));
  auto none = again("interrupted", {from_hub, "checkpoint.every_steps=2", "train.max_steps=7"});
  CHECK(none.exit_code == 2);
  CHECK_THAT(none.err,
             Contains("model.init_from: " + hub.path() + " does not exist, and " + dir.file("interrupted/checkpoints") +
                      " holds no checkpoint to resume from: the run "
                      "cannot go on without the weights it started from"));
  auto gone = again("elsewhere", {from_hub});
  CHECK(gone.exit_code == 2);
  CHECK_THAT(gone.err, Contains("model.init_from: " + hub.path() + " does not exist"));
  // An export made now carries the hub's other keys all the same: the run's config.json kept them.
  auto moved = run_command({bin("ddp-export"), dir.file("imported"), "-o", dir.file("moved_export")},
                           std::chrono::seconds(120));
  INFO(moved.out << moved.err);
  REQUIRE(moved.exit_code == 0);
  CHECK_THAT(read_file(dir.file("moved_export/config.json")),
             Contains("\"bos_token_id\": 128000") && Contains("\"max_position_embeddings\": 131072"));
}

TEST_CASE("a GPT worker SIGKILLed mid-run resumes bit-identically", "[gpt][faults][slow]") {
  TempDir straight, killed;
  auto sets = [](const TempDir& dir) {
    return std::vector<std::string>{"run.output_dir=" + dir.file("out"), "train.epochs=20", "train.max_steps=400",
                                    "train.batch_size=8", "checkpoint.every_steps=100", "checkpoint.keep_last=100",
                                    "data.eval_split=none", "model.dropout=0.1"};
  };
  auto a = ddprun(2, write_gpt_config(straight), sets(straight));
  INFO(a.out << a.err);
  REQUIRE(a.exit_code == 0);
  std::string out = killed.file("out");
  std::string command = "OMP_NUM_THREADS=1 " + bin("ddprun") + " --standalone --nproc-per-node 2 --max-restarts 1 " +
                        write_gpt_config(killed);
  for (const auto& s : sets(killed)) command += " --set '" + s + "'";
  auto b = run_shell(command + " & L=$!; " + until_true("[ -e " + out + "/checkpoints/step_0000000200.json ]") +
                         "pkill -KILL -n -f '[d]dp-train.*" + killed.path() + "'; wait $L; echo status=$?",
                     std::chrono::seconds(240));
  INFO(b.out << b.err);
  CHECK(count_lines(b.out, "status=0") == 1);
  CHECK_THAT(b.err, Contains("signal 9 (SIGKILL)"));
  CHECK_THAT(b.out, Contains("resumed from"));
  std::string x = read_file(straight.file("out/model.pt")), y = read_file(out + "/model.pt");
  CHECK((!x.empty() && x == y));
}

TEST_CASE("token files in every format train: llm.c uint16 and uint32, headerless with data.token_dtype, .npy",
          "[gpt]") {
  TempDir dir;
  auto [train, val] = text_tokens();
  std::string config = write_gpt_config(dir);
  auto trains = [&](const std::string& train_file, const std::string& val_file, std::vector<std::string> sets) {
    sets.insert(sets.end(), {"data.path=" + train_file, "data.eval_path=" + val_file, "train.max_steps=3",
                             "run.output_dir=" + dir.file("out-" + fs::path(train_file).filename().string())});
    auto r = ddprun(1, config, sets);
    INFO(r.out << r.err);
    CHECK(r.exit_code == 0);
    return r;
  };
  write_file(dir.file("t32.bin"), llmc_shard(train, 20240801, 7));
  write_file(dir.file("v32.bin"), llmc_shard(val, 20240801, 7));
  CHECK_THAT(trains(dir.file("t32.bin"), dir.file("v32.bin"), {}).out, Contains("(llm.c uint32)"));
  // The header says uint32: a data.token_dtype saying uint16 is not read, and said so (was: silently).
  write_file(dir.file("declared.bin"), llmc_shard(train, 20240801, 7));
  auto contradicted = trains(dir.file("declared.bin"), dir.file("v32.bin"), {"data.token_dtype=uint16"});
  CHECK_THAT(contradicted.out + contradicted.err,
             Contains("data.token_dtype uint16 is not read: " + dir.file("declared.bin") +
                      " has a header that says its tokens are llm.c uint32"));
  // nanoGPT's train.bin: the tokens alone, as uint16.
  std::string raw = llmc_shard(train).substr(1024), raw_val = llmc_shard(val).substr(1024);
  write_file(dir.file("train.bin"), raw);
  write_file(dir.file("val_raw.bin"), raw_val);
  CHECK_THAT(trains(dir.file("train.bin"), dir.file("val_raw.bin"), {"data.token_dtype=uint16"}).out,
             Contains("(raw uint16)"));
  // A 1-D int32 .npy: version 1.0 header padded to 64 bytes.
  auto npy = [](const std::vector<int64_t>& tokens) {
    std::string header = "{'descr': '<i4', 'fortran_order': False, 'shape': (" + std::to_string(tokens.size()) + ",), }";
    header.append(63 - (10 + header.size()) % 64, ' ');  // 10 bytes of preamble, the newline: a multiple of 64
    header += '\n';
    std::string bytes = std::string("\x93NUMPY\x01\x00", 8);
    bytes += static_cast<char>(header.size() & 0xff);
    bytes += static_cast<char>(header.size() >> 8);
    bytes += header;
    for (int64_t t : tokens) {
      int32_t v = static_cast<int32_t>(t);
      bytes.append(reinterpret_cast<const char*>(&v), 4);
    }
    return bytes;
  };
  write_file(dir.file("t.npy"), npy(train));
  write_file(dir.file("v.npy"), npy(val));
  CHECK_THAT(trains(dir.file("t.npy"), dir.file("v.npy"), {}).out, Contains("(npy int32)"));
}

TEST_CASE("token shards added to or removed from data.path's glob since a checkpoint: its resume is refused, naming "
          "the shards, and goes on once they are back",
          "[gpt][rerun][errors]") {
  TempDir dir;
  std::string config = write_gpt_config(dir);
  std::vector<std::string> sets{"train.max_steps=4", "checkpoint.every_steps=2", "data.eval_split=none"};
  auto first = ddprun(1, config, sets);
  INFO(first.out << first.err);
  REQUIRE(first.exit_code == 0);
  sets[0] = "train.max_steps=6";
  const std::string checkpoint = dir.file("out/checkpoints/step_0000000004.json");
  const std::string shard_1 = dir.file("train_001.bin"), shard_1_bytes = std::to_string(fs::file_size(shard_1));
  // A third shard that the glob now matches.
  fs::copy_file(dir.file("train_000.bin"), dir.file("train_002.bin"));
  auto added = ddprun(1, config, sets);
  INFO(added.out << added.err);
  CHECK(added.exit_code == 2);
  CHECK_THAT(added.err, Contains("data.path: the training data are not those " + checkpoint + " was trained on (then, "
                                 "not now: training windows: ") &&
                            Contains("; now, not then: " + dir.file("train_002.bin") + ": ") &&
                            Contains("repeating some samples and skipping others; restore the data as they were"));
  // One shard fewer.
  fs::remove(dir.file("train_002.bin"));
  fs::rename(shard_1, dir.file("moved.bin"));
  auto removed = ddprun(1, config, sets);
  INFO(removed.out << removed.err);
  CHECK(removed.exit_code == 2);
  CHECK_THAT(removed.err, Contains("(then, not now: " + shard_1 + ": " + shard_1_bytes + " bytes; content of " + shard_1 +
                                   ": XXH64 ") && Contains(" of sampled blocks; training windows: "));
  CHECK_THAT(read_file(dir.file("out/metrics.jsonl")), !Contains("\"step\": 5,"));
  // Rewritten at the same size, its last tokens in another order: refused by its sampled content.
  fs::rename(dir.file("moved.bin"), shard_1);
  const std::string original = read_file(shard_1);
  std::string rewritten = original;
  std::rotate(rewritten.end() - 1024, rewritten.end() - 1022, rewritten.end());  // by one uint16 token
  REQUIRE(rewritten != original);
  write_file(shard_1, rewritten);
  auto other = ddprun(1, config, sets);
  INFO(other.out << other.err);
  CHECK(other.exit_code == 2);
  CHECK_THAT(other.err, Contains("(then, not now: content of " + shard_1 + ": XXH64 ") &&
                            Contains("; now, not then: content of " + shard_1 + ": XXH64 "));
  // The data as they were: the run goes on.
  write_file(shard_1, original);
  auto back = ddprun(1, config, sets);
  INFO(back.out << back.err);
  CHECK(back.exit_code == 0);
  CHECK_THAT(back.out, Contains("resumed from " + dir.file("out/checkpoints/step_0000000004.pt") + " at step 4"));
}

TEST_CASE("a token shard cut short while it is mapped ends the run with one line naming it, not a bare SIGBUS",
          "[gpt][faults]") {
  TempDir dir;
  std::string config = write_gpt_config(dir);
  std::string log = dir.file("log");
  // Training for long; once it logs its second step, the second shard loses all but 512 tokens,
  // and the windows past them (most of its windows) are read in the steps that follow.
  auto r = run_shell("OMP_NUM_THREADS=1 " + bin("ddprun") + " --standalone --nproc-per-node 1 " + config +
                         " --set train.epochs=1000 --set train.log_every=1 --set data.eval_split=none > " + log +
                         " 2>&1 & pid=$!; for i in $(seq 1200); do grep -q 'step 2/' " + log +
                         " && break; sleep 0.1; done; truncate -s 2048 " + dir.file("train_001.bin") +
                         "; wait $pid; echo \"exit $?\"",
                     std::chrono::seconds(240));
  std::string out = read_file(log);
  INFO(out << r.out << r.err);
  CHECK_THAT(r.out, Contains("exit 2"));
  CHECK_THAT(out, Contains("ddp-train: rank 0: error: data.path: " + dir.file("train_001.bin") +
                           " shrank while this run read it (") &&
                      Contains(" bytes when mapped; SIGBUS past its new end). A data file must not change during a run"));
  CHECK_THAT(out, !Contains("signal 7"));
}

TEST_CASE("bad token files: one line each naming the file and the cause, exit 2", "[gpt]") {
  TempDir dir;
  std::string config = write_gpt_config(dir);
  auto [train, val] = text_tokens();
  auto fails = [&](const std::string& file, const std::string& content, const std::string& expected,
                   std::vector<std::string> sets = {}) {
    if (!content.empty() || file.find('*') == std::string::npos) write_file(dir.file(file), content);
    sets.insert(sets.end(), {"data.path=" + dir.file(file), "train.max_steps=2"});
    auto r = ddprun(1, config, sets);
    INFO(r.out << r.err);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains(expected));
    return r;
  };
  fails("magic.bin", llmc_shard(train, 20240521), "magic.bin: is not an llm.c token shard (magic 20240521");
  fails("version.bin", llmc_shard(train, 20240520, 2), "version.bin: llm.c shard with magic 20240520 has version 2");
  std::string truncated = llmc_shard(train);
  truncated.resize(truncated.size() - 1000);
  fails("truncated.bin", truncated,
        "truncated.bin: its llm.c header says " + std::to_string(train.size()) + " tokens, the file holds " +
            std::to_string(2 * train.size() - 1000) + " bytes of 2-byte tokens");
  fails("empty.bin", "", "empty.bin: is empty");
  fails("short.bin", llmc_shard({1, 2, 3}), "short.bin: holds 3 tokens, fewer than one window of model.block_size + 1 = 33");
  std::vector<int64_t> bad = train;
  bad[5000] = 300;
  fails("vocab.bin", llmc_shard(bad, 20240801, 7),
        "vocab.bin: token 5000 (byte offset 21024) is 300, outside model.vocab_size 256 (ids 0 to 255)");
  fails("nothing_*.bin", "", "data.path: " + dir.file("nothing_*.bin") + " matches no file");
  fails("headerless.bin", llmc_shard(train).substr(1024), "data.token_dtype: uint16 or uint32");
}

TEST_CASE("DDPRUN_PROFILE writes each rank's operator trace of the steps asked for", "[gpt]") {
  TempDir dir;
  std::string config = write_gpt_config(dir);
  auto r = run_shell("DDPRUN_PROFILE=3:2 OMP_NUM_THREADS=1 " + bin("ddprun") + " --standalone --nproc-per-node 2 " +
                         config + " --set train.max_steps=6 --set data.eval_split=none",
                     std::chrono::seconds(120));
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("profile of steps 3 to 4 written to " + dir.file("out/profile_rank0.trace.json")));
  for (const char* rank : {"0", "1"}) {
    std::string trace = read_file(dir.file(std::string("out/profile_rank") + rank + ".trace.json"));
    CHECK_THAT(trace, Contains("\"name\": \"aten::mm\""));
  }
  auto summary = run_command({"python3", std::string(DDP_SOURCE_DIR) + "/scripts/profile_summary.py",
                              dir.file("out/profile_rank0.trace.json"), "--steps", "2"},
                             std::chrono::seconds(60));
  INFO(summary.out << summary.err);
  CHECK(summary.exit_code == 0);
  CHECK_THAT(summary.out, Contains("| aten::mm |") && Contains("inside operators"));
  auto bad = run_shell("DDPRUN_PROFILE=3 " + bin("ddprun") + " --standalone " + config +
                           " --set train.max_steps=2 --set run.output_dir=" + dir.file("bad"),
                       std::chrono::seconds(60));
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Contains("DDPRUN_PROFILE: expected FIRST:COUNT (steps, COUNT >= 1), got '3'"));
}

TEST_CASE("train.cuda_graphs on the CPU: on says once why it runs eagerly, auto says nothing, and both train as off",
          "[gpt][step_graph]") {
  TempDir dir;
  std::string config = write_gpt_config(dir);
  auto run = [&](const std::string& mode) {
    auto r = ddprun(1, config, {"run.output_dir=" + dir.file(mode), "train.max_steps=12", "data.eval_split=none",
                                "train.cuda_graphs=" + mode});
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    return r;
  };
  auto mentions = [](const std::string& text) {  // lines that name the key, the resolved config's aside
    int n = 0;
    for (std::size_t at = text.find("train.cuda_graphs:"); at != std::string::npos;
         at = text.find("train.cuda_graphs:", at + 1))
      ++n;
    return n;
  };
  auto on = run("on");
  CHECK_THAT(on.out + on.err, Contains("train.cuda_graphs: on, but the model is on the CPU (a CUDA graph is a GPU's): "
                                       "steps run eagerly"));
  CHECK(mentions(on.out + on.err) == 1);
  auto quiet = run("auto");
  CHECK(mentions(quiet.out + quiet.err) == 0);
  run("off");
  auto weights = [&](const std::string& mode) { return load_weights(dir.file(mode + "/model.pt")); };
  for (const auto& [name, tensor] : weights("off")) {
    INFO(name);
    CHECK(torch::equal(tensor, weights("on").at(name)));
    CHECK(torch::equal(tensor, weights("auto").at(name)));
  }
}

TEST_CASE("on a GPU: a step captured as a CUDA graph and replayed trains as the eager step, within 1e-6 a loss over "
          "50 steps, under a warmed-up cosine schedule, and across a checkpoint and a resume",
          "[gpt][step_graph][gpu]") {
  SKIP_WITHOUT_GPU();
  TempDir dir;
  // Cosine after 10 warm-up steps, spanning 50 steps whatever max_steps is: the rate changes every step.
  std::string config = write_gpt_config(dir);
  auto run = [&](const std::string& name, const std::string& mode, int64_t steps,
                 std::vector<std::string> extra = {}) {
    std::vector<std::string> sets{"run.output_dir=" + dir.file(name), "train.max_steps=" + std::to_string(steps),
                                  "train.log_every=1", "data.eval_split=none", "dist.device=cuda", "train.tf32=false",
                                  "schedule.decay_steps=50", "train.cuda_graphs=" + mode};
    sets.insert(sets.end(), extra.begin(), extra.end());
    auto r = ddprun(1, config, sets);
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    return r;
  };
  auto losses = [&](const std::string& name) { return metric_values(dir.file(name + "/metrics.jsonl"), "loss"); };
  run("eager", "off", 50);
  auto on = run("graphs", "on", 50);
  CHECK_THAT(on.out, Contains("train.cuda_graphs: step 2 captured (1 × [16, 32] Long): later steps of these shapes "
                              "replay it"));
  CHECK_THAT(on.out, Contains("train.cuda_graphs: 47 of this run's 50 steps replayed the captured one"));
  CHECK_THAT(on.out, !Contains("differ from the captured step's"));
  auto eager = losses("eager"), replayed = losses("graphs");
  REQUIRE(eager.size() == 50);
  REQUIRE(replayed.size() == eager.size());
  for (std::size_t i = 0; i < eager.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(std::abs(replayed[i] - eager[i]) <= 1e-6);
  }
  // Stopped at 25 with a checkpoint, resumed to 50: the host's step counts the replays advanced are in
  // the checkpoint, so AdamW's bias corrections after the resume are the uninterrupted run's.
  run("resumed", "on", 25, {"checkpoint.every_steps=25"});
  auto second = run("resumed", "on", 50, {"checkpoint.every_steps=25"});
  CHECK_THAT(second.out, Contains("train.cuda_graphs: 22 of this run's 25 steps replayed the captured one"));
  auto resumed = losses("resumed");
  REQUIRE(resumed.size() == 50);
  for (std::size_t i = 25; i < eager.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(std::abs(resumed[i] - eager[i]) <= 1e-6);
  }
}

TEST_CASE("profile_summary.py reads a GPU trace's kernels and the GPU's busy share, and names a broken trace",
          "[gpt]") {
  // Kineto's form (a CUDA build's DDPRUN_PROFILE, torch.profiler's export): an object of traceEvents,
  // host operators and GPU kernels and copies by category. Kernels 20-320 and 200-250 us overlap, a
  // copy 400-500: busy 400 of the 480 us from the first start to the last end.
  TempDir dir;
  write_file(dir.file("kineto.json"), R"({"schemaVersion": 1, "traceEvents": [
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 10, "dur": 5},
    {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 150, "dur": 20},
    {"ph": "X", "cat": "kernel", "name": "sm90_gemm", "pid": 0, "tid": 7, "ts": 20, "dur": 300},
    {"ph": "X", "cat": "kernel", "name": "add_kernel", "pid": 0, "tid": 7, "ts": 200, "dur": 50},
    {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 8, "ts": 400, "dur": 100},
    {"ph": "i", "name": "a marker", "ts": 5}]})");
  auto summary = [&](const std::string& name) {
    return run_command({"python3", std::string(DDP_SOURCE_DIR) + "/scripts/profile_summary.py", dir.file(name),
                        "--steps", "1"},
                       std::chrono::seconds(60));
  };
  auto r = summary("kineto.json");
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("| aten::mm | 0.10 | 83.3% |") && Contains("| sm90_gemm | 0.30 | 66.7% |") &&
                        Contains("| Memcpy HtoD | 0.10 | 22.2% |"));
  CHECK_THAT(r.out, Contains("GPU: 3 kernels, copies and sets per step, 0.5 ms/step of them; busy 0.4 of the 0.5 "
                             "ms/step from its first to its last (83.3%)"));
  CHECK_THAT(r.out, !Contains("cudaLaunchKernel"));  // the runtime's calls are neither operators nor kernels
  write_file(dir.file("cut.json"), R"({"traceEvents": [{"ph": "X", "cat": "cpu_op", "na)");
  auto cut = summary("cut.json");
  CHECK(cut.exit_code != 0);
  CHECK_THAT(cut.err, Contains(dir.file("cut.json") + ": cannot be read as a Chrome trace"));
  write_file(dir.file("empty.json"), R"({"traceEvents": []})");
  auto empty = summary("empty.json");
  CHECK(empty.exit_code != 0);
  CHECK_THAT(empty.err, Contains(dir.file("empty.json") + " holds no operator events"));
}

TEST_CASE("a TorchScript language model trains as causal_lm, its vocabulary checked at its first output", "[gpt]") {
  TempDir dir;
  std::string config = write_gpt_config(dir);
  auto trains = ddprun(2, config, {"model.name=torchscript", "model.path=" + python_fixture("tiny_lm.pt"),
                                   "train.max_steps=150", "train.epochs=10", "eval.every_steps=150"});
  INFO(trains.out << trains.err);
  REQUIRE(trains.exit_code == 0);
  double loss = metric_value(dir.file("out/metrics.jsonl"), "eval_loss");
  CHECK((loss > 0 && loss < 5.0));  // below a uniform guess over 256 bytes, 5.55
  CHECK(metric_value(dir.file("out/metrics.jsonl"), "eval_bits_per_byte") == Approx(loss / std::log(2.0)));
  CHECK(fs::exists(dir.file("out/model_scripted.pt")));

  auto small = ddprun(1, config, {"model.name=torchscript", "model.path=" + python_fixture("tiny_lm_64.pt"),
                                  "train.max_steps=2", "run.output_dir=" + dir.file("small")});
  CHECK(small.exit_code == 2);
  CHECK_THAT(small.err, Contains("outside model.path " + python_fixture("tiny_lm_64.pt") +
                                 "'s output width (its vocabulary) 64 (ids 0 to 63)"));

  auto flat = ddprun(1, config, {"model.name=torchscript", "model.path=" + python_fixture("flat_lm.pt"),
                                 "train.max_steps=2", "run.output_dir=" + dir.file("flat")});
  CHECK(flat.exit_code == 2);
  CHECK_THAT(flat.err, Contains("model.path: train.task causal_lm needs logits [B, T, V] for tokens [B, T]; for [1, "
                                "32] it returned [1, 256]"));
}

TEST_CASE("text to text with no Python: ddp-tokenize's SentencePiece shards train a Llama at world 2, and "
          "ddp-generate writes text through the tokenizer.model it finds beside them", "[llama][text][python]") {
  TempDir dir;
  auto tokenized = run_command({bin("ddp-tokenize"), dir.file("tokens"), "--text", kText, "--vocab-size", "400",
                                "--name", "gpl"},
                               std::chrono::seconds(120));
  INFO(tokenized.out << tokenized.err);
  REQUIRE(tokenized.exit_code == 0);
  const std::string config = dir.file("llama.yaml");
  std::ofstream(config) << "run: {output_dir: " << dir.file("out") << "}\n"
                        << "data: {dataset: tokens, path: '" << dir.file("tokens/gpl_train_*.bin")
                        << "', eval_path: '" << dir.file("tokens/gpl_val_*.bin") << "'}\n"
                        << "model: {name: llama, n_layer: 2, n_head: 4, n_kv_heads: 2, dim: 64, multiple_of: 32, "
                           "block_size: 32, vocab_size: 400}\n"
                        << "optim: {name: adamw, lr: 0.003}\n"
                        << "train: {task: causal_lm, epochs: 20, max_steps: 150, batch_size: 8, log_every: 50}\n"
                        << "eval: {every_epochs: 0, at_start: false, batch_size: 64}\n"
                        << "checkpoint: {every_epochs: 0}\n";
  auto trained = ddprun(2, config, {});
  INFO(trained.out << trained.err);
  REQUIRE(trained.exit_code == 0);
  const double loss = metric_value(dir.file("out/metrics.jsonl"), "eval_loss");
  CHECK(loss < std::log(400.0) - 1.0);  // it learned: a uniform guess is ln 400 = 5.99

  auto generate = [&](const std::string& options) {
    return run_shell(bin("ddp-generate") + " " + dir.file("out") + " " + options, std::chrono::seconds(60));
  };
  auto text = generate("--prompt 'the Program' --tokens 40 --temperature 0");
  INFO(text.out << text.err);
  REQUIRE(text.exit_code == 0);
  CHECK(text.out.rfind("the Program", 0) == 0);
  CHECK(std::regex_search(text.out, std::regex(" (the|of|to|and|or|this|that) ")));  // words, not pieces
  CHECK(text.out.find("▁") == std::string::npos);
  // The same draws as ids decode, by Python's sentencepiece, to the same text.
  auto ids = generate("--prompt 'the Program' --tokens 40 --temperature 0 --ids");
  REQUIRE(ids.exit_code == 0);
  if (run_shell("/usr/bin/python3 -c 'import sentencepiece'").exit_code != 0) {
    WARN("skipped: the check against Python's sentencepiece (python3-sentencepiece; scripts/setup.sh installs it)");
  } else {
    auto decoded = run_command({"/usr/bin/python3", std::string(DDP_SOURCE_DIR) + "/tests/support/sentencepiece_decode.py",
                                dir.file("tokens/tokenizer.model"), "the Program", ids.out},
                               std::chrono::seconds(60));
    INFO(decoded.err);
    CHECK(decoded.out == text.out);
  }
  // The byte piece <0x00> (id 3, after <unk>, <s> and </s>) is a NUL, printed as any text is: output
  // used to stop at it.
  auto nul = generate("--prompt-ids '3 3' --tokens 0");
  CHECK(nul.out == std::string("\0\0\n", 3));
  // An output that cannot be written is said, with 74 (was: exit 0, nothing said).
  auto full = generate("--prompt 'the Program' --tokens 5 > /dev/full");
  CHECK(full.exit_code == 74);
  CHECK_THAT(full.err, Contains("cannot write the sample to standard output: No space left on device"));
  // A config that does not fit model.pt is named as that, not as a tokenizer too large for it (was:
  // "tokenizer.model has 400 pieces, more than the model's 256").
  write_file(dir.file("bytes.yaml"), std::regex_replace(read_file(dir.file("out/config.yaml")),
                                                        std::regex("vocab_size: 400"), "vocab_size: 256"));
  auto other_vocabulary = generate("--config " + dir.file("bytes.yaml") + " --tokens 3");
  CHECK(other_vocabulary.exit_code == 2);
  CHECK_THAT(other_vocabulary.err, Contains("wrong shapes") && Contains("from the run of") && !Contains("pieces"));
  // Its model.pt with no tokenizer beside it or its data: told that text needs one.
  std::filesystem::create_directories(dir.file("bare"));
  std::filesystem::copy_file(dir.file("out/model.pt"), dir.file("bare/model.pt"));
  write_file(dir.file("bare/config.yaml"), std::regex_replace(read_file(dir.file("out/config.yaml")),
                                                              std::regex("/tokens/gpl_"), "/nowhere/gpl_"));
  auto no_tokenizer = run_shell(bin("ddp-generate") + " " + dir.file("bare") + " --tokens 3", std::chrono::seconds(60));
  CHECK(no_tokenizer.exit_code == 2);
  CHECK_THAT(no_tokenizer.err, Contains("model.vocab_size is 400, so its tokens are not bytes"));
  // --ids prints ids, but the prompt is still text: the way in is --prompt-ids.
  auto ids_out =
      run_shell(bin("ddp-generate") + " " + dir.file("bare") + " --ids --tokens 3", std::chrono::seconds(60));
  CHECK(ids_out.exit_code == 2);
  CHECK_THAT(ids_out.err, Contains("--ids: model.vocab_size is 400") &&
                              Contains("the prompt cannot be made into tokens: give it as --prompt-ids"));
  CHECK(run_shell(bin("ddp-generate") + " " + dir.file("bare") + " --ids --prompt-ids '5 6' --tokens 3",
                  std::chrono::seconds(60))
            .exit_code == 0);

  // The run kept the tokenizer its tokens were made with: one made again beside the data later
  // (ddp-tokenize --name gpl, another vocabulary) changes neither ddp-generate's text nor ddp-export's copy.
  const std::string kept = read_file(dir.file("tokens/tokenizer.model"));
  CHECK(read_file(dir.file("out/tokenizer.model")) == kept);
  auto remade = run_command({bin("ddp-tokenize"), dir.file("tokens"), "--text", kText, "--vocab-size", "380",
                             "--name", "gpl"},
                            std::chrono::seconds(120));
  INFO(remade.out << remade.err);
  REQUIRE(remade.exit_code == 0);
  REQUIRE(read_file(dir.file("tokens/tokenizer.model")) != kept);
  CHECK(generate("--prompt 'the Program' --tokens 40 --temperature 0").out == text.out);
  auto exported = run_command({bin("ddp-export"), dir.file("out"), "-o", dir.file("exported")});
  INFO(exported.out << exported.err);
  REQUIRE(exported.exit_code == 0);
  CHECK(read_file(dir.file("exported/tokenizer.model")) == kept);
  // config.json names the tokenizer's own <s> and </s> (ids 1 and 2), for transformers' generate:
  // were absent, which reads as the family's defaults (GPT-2's 50256, past a vocabulary of 400).
  for (const std::string written : {"out/config.json", "exported/config.json"})
    CHECK_THAT(read_file(dir.file(written)), Contains("\"bos_token_id\": 1,") && Contains("\"eos_token_id\": 2,"));

  // A tokenizer of more pieces than the model has is not the one it was trained with.
  auto other = run_command({bin("ddp-tokenize"), dir.file("other"), "--text", kText, "--vocab-size", "600"},
                           std::chrono::seconds(120));
  REQUIRE(other.exit_code == 0);
  auto wrong = generate("--tokenizer " + dir.file("other/tokenizer.model") + " --tokens 3");
  CHECK(wrong.exit_code == 2);
  CHECK(wrong.out.empty());
  CHECK_THAT(wrong.err, Contains(dir.file("other/tokenizer.model") + " has 600 pieces, more than the model's 400"));
  auto missing = generate("--tokenizer " + dir.file("nowhere.model") + " --tokens 3");
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.err, Contains(dir.file("nowhere.model") + ": no such file (--tokenizer)"));
}

TEST_CASE("a GPT's run directory is a Hugging Face GPT-2 directory: an independent GPT-2 of Conv1D layers loads "
          "its model.safetensors strictly from config.json alone and scores ddprun's eval loss within 1e-4, and "
          "model.init_from that directory continues from it", "[gpt][python]") {
  TempDir dir;
  // No biases: GPT-2's are exported as zeros, and must be zeros to come back.
  auto trained = ddprun(2, write_gpt_config(dir), {"train.epochs=3", "train.max_steps=60"});
  INFO(trained.out << trained.err);
  REQUIRE(trained.exit_code == 0);
  const double loss = metric_value(dir.file("out/metrics.jsonl"), "eval_loss");
  CHECK(std::abs(python_eval_loss("eval_gpt2.py", dir.file("out")) - loss) < 1e-4);
  const std::string config = read_file(dir.file("out/config.json"));
  CHECK_THAT(config, Contains("\"model_type\": \"gpt2\"") && Contains("\"n_positions\": 32") &&
                         Contains("\"activation_function\": \"gelu\"") && Contains("\"bias\": false"));
  ddp::SafetensorsFile file(dir.file("out/model.safetensors"));
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& entry : file.entries()) shapes[entry.name] = entry.shape;
  CHECK(shapes.at("transformer.h.0.attn.c_attn.weight") == std::vector<int64_t>{32, 96});  // Conv1D: [in, out]
  CHECK(shapes.at("transformer.h.1.mlp.c_proj.bias") == std::vector<int64_t>{32});
  CHECK(shapes.count("lm_head.weight") == 0);  // tied to wte

  // The directory back in: its config.json gives the model, and the first eval is the exported model's.
  TempDir again;
  std::string yaml = std::regex_replace(read_file(dir.file("config.yaml")), std::regex("model: \\{[^}]*\\}"),
                                        "model: {init_from: " + dir.file("out") + "}");
  yaml = std::regex_replace(yaml, std::regex(dir.file("out")), again.file("out"), std::regex_constants::format_first_only);
  write_file(again.file("config.yaml"), yaml);
  auto resumed = ddprun(1, again.file("config.yaml"), {"eval.at_start=true", "train.max_steps=1", "optim.lr=1e-9"});
  INFO(resumed.out << resumed.err);
  REQUIRE(resumed.exit_code == 0);
  const std::string log = resumed.out + resumed.err;
  std::smatch first;
  REQUIRE(std::regex_search(log, first, std::regex("eval at step 0[^\n]*loss ([0-9.]+)")));
  CHECK(std::stod(first[1]) == Approx(loss).margin(1e-4));
  // Split by tensor parallelism or sharded, each rank reads its part of the transposed Conv1D weights
  // alone, as boxes of the file's (Note [Deferred initialisation]), and starts from the same model.
  for (const std::string layout : {"tensor=2", "shard=parameters"}) {
    auto part = ddprun(2, again.file("config.yaml"), {"eval.at_start=true", "train.max_steps=1", "optim.lr=1e-9",
                                                      "dist." + layout, "run.output_dir=" + again.file(layout)});
    INFO(layout << "\n" << part.out << part.err);
    REQUIRE(part.exit_code == 0);
    const std::string part_log = part.out + part.err;
    REQUIRE(std::regex_search(part_log, first, std::regex("eval at step 0[^\n]*loss ([0-9.]+)")));
    CHECK(std::stod(first[1]) == Approx(loss).margin(1e-4));
  }

  // Fine-tuning at a shorter context and another dropout, as nanoGPT's crop_block_size and
  // override_args allow (were refused): wpe's first rows, read by each rank for its share.
  auto wpe_of = [](const std::string& path) {
    ddp::SafetensorsFile file(path);
    for (const auto& entry : file.entries())
      if (entry.name == "transformer.wpe.weight") return file.read(entry);
    FAIL("no transformer.wpe.weight in " << path);
    return torch::Tensor();
  };
  const torch::Tensor wpe = wpe_of(dir.file("out/model.safetensors"));
  for (const std::string layout : {"shard=none", "shard=parameters"}) {
    const std::string out = again.file("cropped_" + layout.substr(6));
    auto cropped = ddprun(2, again.file("config.yaml"),
                          {"model.block_size=16", "model.dropout=0.2", "train.max_steps=1", "optim.lr=1e-9",
                           "dist." + layout, "run.output_dir=" + out});
    INFO(layout << "\n" << cropped.out << cropped.err);
    REQUIRE(cropped.exit_code == 0);
    CHECK_THAT(cropped.out + cropped.err, Contains("its 32 positions (wpe) are more than model.block_size 16: the "
                                                   "first 16 are kept, as nanoGPT's crop_block_size keeps them"));
    const torch::Tensor kept = wpe_of(out + "/model.safetensors");
    REQUIRE(kept.sizes() == torch::IntArrayRef({16, 32}));
    CHECK(torch::allclose(kept, wpe.narrow(0, 0, 16), 0, 1e-6));
    CHECK_THAT(read_file(out + "/config.json"), Contains("\"n_positions\": 16") && Contains("\"resid_pdrop\": 0.2"));
  }
  auto longer = ddprun(1, again.file("config.yaml"), {"model.block_size=64", "run.output_dir=" + again.file("longer")});
  CHECK(longer.exit_code == 2);
  CHECK_THAT(longer.err, Contains("model.block_size: 64 here, but " + dir.file("out") +
                                  "/config.json (model.init_from) makes it at most 32; set it lower, or leave it out"));

  // GPT-2's own activation is refused, not approximated; a bias the model cannot hold is named.
  TempDir broken;
  std::filesystem::copy(dir.file("out/model.safetensors"), broken.file("model.safetensors"));
  write_file(broken.file("config.json"), std::regex_replace(config, std::regex("\"gelu\""), "\"gelu_new\""));
  auto gelu = ddprun(1, again.file("config.yaml"), {"model.init_from=" + broken.path(), "run.output_dir=" + broken.file("gelu")});
  CHECK(gelu.exit_code == 2);
  CHECK_THAT(gelu.err, Contains(broken.file("config.json") + ": activation_function \"gelu_new\" (GPT-2's own tanh "
                                                             "approximation), which ddprun's GPT (nanoGPT's) does not have"));
  auto weights = ddp::read_state_dict_file(dir.file("out/model.safetensors"));
  for (auto& [name, tensor] : weights)
    if (name == "transformer.h.0.ln_1.bias") tensor.fill_(0.5);
  ddp::write_safetensors(broken.file("model.safetensors"), weights);
  write_file(broken.file("config.json"), config);
  auto bias = ddprun(1, again.file("config.yaml"), {"model.init_from=" + broken.path(), "run.output_dir=" + broken.file("bias")});
  CHECK(bias.exit_code == 2);
  CHECK_THAT(bias.err, Contains("transformer.h.0.ln_1.bias is not zero, and model.bias false has no bias to take it"));
}

TEST_CASE("ddp-export writes a sharded run's checkpoint as a Hugging Face directory, model.safetensors split above "
          "--max-shard-size with its index, the weights those the run ended with", "[llama]") {
  TempDir dir;
  const std::string config = write_gpt_config(dir);
  write_file(dir.file("tokenizer.model"), "the tokenizer the shards were made with");
  auto trained = ddprun(2, config, {"model.name=llama", "model.dim=32", "model.n_kv_heads=1", "model.multiple_of=16",
                                    "dist.shard=parameters", "train.epochs=3", "train.max_steps=40", "checkpoint.every_steps=20",
                                    "data.eval_split=none"});
  INFO(trained.out << trained.err);
  REQUIRE(trained.exit_code == 0);
  auto exported = run_command({bin("ddp-export"), dir.file("out"), "--max-shard-size", "100KB"}, std::chrono::seconds(120));
  INFO(exported.out << exported.err);
  REQUIRE(exported.exit_code == 0);
  const std::string out = dir.file("out/export-step-40");
  CHECK_THAT(exported.out, Contains("exported the checkpoint of step 40") && Contains(out));
  CHECK(!fs::exists(out + "/model.safetensors"));  // over 100 KB: shards and their index
  CHECK(fs::exists(out + "/model-00001-of-00002.safetensors"));
  CHECK_THAT(read_file(out + "/model.safetensors.index.json"), Contains("\"total_size\"") && Contains("\"weight_map\""));
  CHECK_THAT(read_file(out + "/config.json"), Contains("\"LlamaForCausalLM\""));
  CHECK(read_file(out + "/tokenizer.model") == "the tokenizer the shards were made with");
  // No SentencePiece model: config.json keeps its ids, and the export says why.
  CHECK_THAT(exported.err, Contains(out + "/config.json: its bos_token_id and eos_token_id are not the tokenizer's, "
                                          "which does not load"));
  CHECK(read_file(out + "/config.yaml") == read_file(dir.file("out/config.yaml")));
  // The checkpoint of the last step holds what the run saved at its end, tensor for tensor.
  auto ended = load_weights(dir.file("out/model.pt")), checkpoint = load_weights(out + "/model.pt");
  REQUIRE(ended.size() == checkpoint.size());
  for (const auto& [name, tensor] : ended) CHECK(torch::equal(tensor, checkpoint.at(name)));
  auto shards = ddp::read_state_dict_file(out);
  CHECK(shards.size() == ended.size());
  for (const auto& [name, tensor] : shards) CHECK(torch::equal(tensor, ended.at(name)));
  // Exported again over it with no tokenizer left: the earlier one goes, as it is not this model's,
  // and only what this export wrote is listed.
  fs::remove(dir.file("tokenizer.model"));
  fs::remove(dir.file("out/tokenizer.model"));
  write_file(out + "/notes.txt", "the user's");
  // 800Kb is 100 KB as save_pretrained reads it (a lowercase b is bits): the same two shards.
  auto again = run_command({bin("ddp-export"), dir.file("out"), "--max-shard-size", "800Kb"}, std::chrono::seconds(120));
  INFO(again.out << again.err);
  REQUIRE(again.exit_code == 0);
  CHECK(!fs::exists(out + "/model.safetensors"));
  CHECK(fs::exists(out + "/model-00002-of-00002.safetensors"));
  CHECK_FALSE(fs::exists(out + "/tokenizer.model"));
  CHECK_THAT(again.out, Contains("config.json") && !Contains("notes.txt") && !Contains("tokenizer.model"));
  CHECK(read_file(out + "/notes.txt") == "the user's");
  // Written beside it and exchanged for it whole (Note [An export replaces its directory whole]):
  // nothing of the staging is left.
  for (const auto& entry : fs::directory_iterator(dir.file("out")))
    CHECK(entry.path().filename().string().find(".export-") == std::string::npos);
  // Where the file system cannot exchange two directories (NFS): two renames, the same result.
  fs::remove(out + "/model-00002-of-00002.safetensors");
  auto no_exchange = run_command({bin("ddp-export"), dir.file("out"), "--max-shard-size", "100KB"},
                                 std::chrono::seconds(120), {"DDPRUN_TEST_NO_RENAME_EXCHANGE=1"});
  INFO(no_exchange.out << no_exchange.err);
  REQUIRE(no_exchange.exit_code == 0);
  CHECK(fs::exists(out + "/model-00002-of-00002.safetensors"));
  CHECK(read_file(out + "/notes.txt") == "the user's");
  for (const auto& entry : fs::directory_iterator(dir.file("out")))
    CHECK(entry.path().filename().string().find(".export-") == std::string::npos);
  // A SIGTERM while the files are written (the export waits at its first look, once its model
  // files are staged): it stops there, and the earlier export is as it was, with nothing beside it.
  auto files_of = [](const std::string& directory) {
    std::map<std::string, std::string> files;
    for (const auto& entry : fs::directory_iterator(directory))
      files[entry.path().filename().string()] = read_file(entry.path().string());
    return files;
  };
  const auto before_stop = files_of(out);
  auto stopped =
      run_shell("DDPRUN_TEST_STOP_CHECK_DELAY=4000 " + bin("ddp-export") + " " + dir.file("out") +
                    " --max-shard-size 50KB 2>" + dir.file("export.err") + " & P=$!; " +
                    until_true("ls " + dir.file("out") + "/.export-step-40.export-*/config.json >/dev/null 2>&1") +
                    "kill -TERM $P; wait $P; echo status=$?",
                std::chrono::seconds(120));
  const std::string stopped_err = read_file(dir.file("export.err"));
  INFO(stopped.out << stopped.err << stopped_err);
  CHECK_THAT(stopped.out, Contains("status=143"));
  CHECK(stopped_err == "ddp-export: stopping once the file in hand is written, and removing the export's own (again "
                       "to stop at once)\nddp-export: stopped: by SIGTERM; the export's files are removed, and -o is "
                       "as it was\n");
  CHECK(files_of(out) == before_stop);
  for (const auto& entry : fs::directory_iterator(dir.file("out")))
    CHECK(entry.path().filename().string().find(".export-") == std::string::npos);

  // An earlier checkpoint, and a run directory that is not one: one line, exit 2.
  auto earlier = run_command({bin("ddp-export"), dir.file("out"), "--checkpoint",
                              dir.file("out/checkpoints/step_0000000020"), "-o", dir.file("step20")},
                             std::chrono::seconds(120));
  CHECK(earlier.exit_code == 0);
  CHECK(fs::exists(dir.file("step20/model.safetensors")));
  // A running run removes the checkpoint being read and writes a newer one (checkpoint.keep_last):
  // the export looks again and takes the newer (was: "neither a checkpoint nor model.pt").
  fs::create_directories(dir.file("rotating/checkpoints"));
  fs::create_directories(dir.file("aside"));
  fs::copy_file(dir.file("out/config.yaml"), dir.file("rotating/config.yaml"));
  for (const auto& entry : fs::directory_iterator(dir.file("out/checkpoints"))) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step_0000000020.", 0) == 0) fs::copy_file(entry.path(), dir.file("rotating/checkpoints/" + name));
    if (name.rfind("step_0000000040.", 0) == 0) fs::copy_file(entry.path(), dir.file("aside/" + name));
  }
  auto rotation = run_shell("DDPRUN_TEST_EXPORT_READ_DELAY=2000 " + bin("ddp-export") + " " + dir.file("rotating") +
                                " -o " + dir.file("rotated") + " 2> " + dir.file("rotating.log") + " & E=$!; " +
                                until_true("grep -q 'test: reading' " + dir.file("rotating.log")) + "rm " +
                                dir.file("rotating/checkpoints/step_0000000020.") + "*; mv " + dir.file("aside/") +
                                "* " + dir.file("rotating/checkpoints/") + "; wait $E; echo status=$?",
                            std::chrono::seconds(120));
  INFO(rotation.out << read_file(dir.file("rotating.log")));
  CHECK(count_lines(rotation.out, "status=0") == 1);
  CHECK_THAT(rotation.out, Contains("exported the checkpoint of step 40"));
  CHECK_THAT(read_file(dir.file("rotating.log")), Contains("was removed while it was read"));
  // Another run's checkpoint whose shapes fit this model's but which is another model (rope_theta):
  // refused, naming the difference, rather than written out under a config.json that misdescribes it.
  fs::create_directories(dir.file("other"));
  const std::string yaml = read_file(dir.file("out/config.yaml"));
  REQUIRE(yaml.find("rope_theta: 10000\n") != std::string::npos);
  write_file(dir.file("other/config.yaml"),
             std::string(yaml).replace(yaml.find("rope_theta: 10000\n"), 18, "rope_theta: 500000\n"));
  auto cross = run_command({bin("ddp-export"), dir.file("other"), "--checkpoint",
                            dir.file("out/checkpoints/step_0000000020"), "-o", dir.file("cross")},
                           std::chrono::seconds(120));
  CHECK(cross.exit_code == 2);
  CHECK_THAT(cross.err, Contains("--checkpoint: " + dir.file("out/checkpoints/step_0000000020.json") +
                                 " was written by a run of another model than " + dir.file("other/config.yaml") +
                                 " says (model.rope_theta 10000 → 5e+05)"));
  CHECK(!fs::exists(dir.file("cross/model.safetensors")));
  // Another family's checkpoint: its name is said (was: "its weights fit", and the keys that differ).
  write_file(dir.file("other/config.yaml"), std::string(yaml).replace(yaml.find("name: llama"), 11, "name: gpt"));
  auto family = run_command({bin("ddp-export"), dir.file("other"), "--checkpoint",
                             dir.file("out/checkpoints/step_0000000020"), "-o", dir.file("cross")},
                            std::chrono::seconds(120));
  CHECK(family.exit_code == 2);
  CHECK_THAT(family.err, Contains(dir.file("out/checkpoints/step_0000000020.json") +
                                  " was written by a run of model.name llama, and " + dir.file("other/config.yaml") +
                                  " says gpt: export it from its own run directory"));
  auto missing = run_command({bin("ddp-export"), dir.file("nowhere")}, std::chrono::seconds(60));
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.err, Contains(dir.file("nowhere/config.yaml") + ": no such file"));
  auto bogus = run_command({bin("ddp-export"), dir.file("out"), "--checkpoint", dir.file("out/config.yaml")},
                           std::chrono::seconds(60));
  CHECK(bogus.exit_code == 2);
  CHECK(std::count(bogus.err.begin(), bogus.err.end(), '\n') == 1);
  auto absent = run_command({bin("ddp-export"), dir.file("out"), "--checkpoint", dir.file("out/checkpoints/step_9")},
                            std::chrono::seconds(60));
  CHECK(absent.exit_code == 2);
  CHECK_THAT(absent.err, Contains("ddp-export: error: --checkpoint: " + dir.file("out/checkpoints/step_9") +
                                  ": no such file"));
  // An empty value is no value: "-o $OUT" with OUT unset exported into RUN/export-step-N, and
  // "--checkpoint $C" exported the newest.
  for (const char* option : {"-o", "--checkpoint"}) {
    auto empty = run_command({bin("ddp-export"), dir.file("out"), option, ""}, std::chrono::seconds(60));
    CHECK(empty.exit_code == 2);
    CHECK_THAT(empty.err, Contains(": expected a value, got an empty one (leave the option out for its default)"));
  }
  // A file system that makes no directories there: the user's to fix (2), not an I/O error to retry (74).
  auto proc = run_command({bin("ddp-export"), dir.file("out"), "-o", "/proc/ddprun-test"}, std::chrono::seconds(60));
  CHECK(proc.exit_code == 2);
  CHECK_THAT(proc.err, Contains("error: cannot make the directory /proc/ddprun-test"));
  auto itself = run_command({bin("ddp-export"), dir.file("out"), "-o", dir.file("out")}, std::chrono::seconds(60));
  CHECK(itself.exit_code == 2);
  CHECK_THAT(itself.err, Contains("is the run directory itself"));
  // Another run's directory: its model.pt and config.yaml stay its own (was: replaced, exit 0).
  fs::create_directories(dir.file("victim"));
  write_file(dir.file("victim/metrics.jsonl"), "{\"step\": 1}\n");
  write_file(dir.file("victim/model.pt"), "the other run's");
  auto victim = run_command({bin("ddp-export"), dir.file("out"), "-o", dir.file("victim")}, std::chrono::seconds(60));
  CHECK(victim.exit_code == 2);
  CHECK_THAT(victim.err, Contains("-o " + dir.file("victim") + " is a run directory (it holds metrics.jsonl)"));
  CHECK(read_file(dir.file("victim/model.pt")) == "the other run's");
  // The run's own checkpoint directory: a checkpoint a running run wrote during the export would
  // have gone with the directory it replaced (was: exit 0, the export among the checkpoints).
  const auto checkpoints_before = files_of(dir.file("out/checkpoints"));
  auto into_checkpoints =
      run_command({bin("ddp-export"), dir.file("out"), "-o", dir.file("out/checkpoints")}, std::chrono::seconds(60));
  CHECK(into_checkpoints.exit_code == 2);
  CHECK_THAT(into_checkpoints.err, Contains("-o " + dir.file("out/checkpoints") + " is a checkpoint directory"));
  CHECK(files_of(dir.file("out/checkpoints")) == checkpoints_before);
  // A directory that is no earlier export: token shards and their tokenizer.model, which an export
  // would drop (was: exit 0, the tokenizer gone and the shards copied); one that holds runs. The
  // current directory: a shell left in a removed directory (was: "File name too long").
  fs::create_directories(dir.file("shards"));
  write_file(dir.file("shards/tokenizer.model"), "the shards' tokenizer");
  write_file(dir.file("shards/kjv_train_000000.bin"), "tokens");
  auto not_export = run_command({bin("ddp-export"), dir.file("out"), "-o", dir.file("shards")}, std::chrono::seconds(60));
  CHECK(not_export.exit_code == 2);
  CHECK_THAT(not_export.err, Contains("-o " + dir.file("shards") + " is no earlier export (it has no "
                                      "model.safetensors) and holds tokenizer.model, which the export would replace"));
  CHECK(read_file(dir.file("shards/tokenizer.model")) == "the shards' tokenizer");
  CHECK(std::distance(fs::directory_iterator(dir.file("shards")), fs::directory_iterator()) == 2);
  auto runs = run_command({bin("ddp-export"), dir.file("out"), "-o", dir.path()}, std::chrono::seconds(60));
  CHECK(runs.exit_code == 2);
  CHECK_THAT(runs.err, Contains("is no earlier export (it has no model.safetensors) and holds "));
  // A directory of directories (a models/ folder, a home, /usr): refused (was: copied whole into the
  // export's place, minutes of I/O with signals held, and left hidden beside it when interrupted).
  fs::create_directories(dir.file("models/other_model"));
  write_file(dir.file("models/other_model/config.json"), "{}");
  auto tree = run_command({bin("ddp-export"), dir.file("out"), "-o", dir.file("models")}, std::chrono::seconds(60));
  CHECK(tree.exit_code == 2);
  CHECK_THAT(tree.err, Contains("-o " + dir.file("models") +
                                " is no earlier export (it has no model.safetensors) and "
                                "holds other_model/, a directory of its own"));
  CHECK(read_file(dir.file("models/other_model/config.json")) == "{}");
  // A Hub clone (a README, its .git): exported into, its files moved into the export by rename,
  // the same files (was: copied, a hard link broken in two), and nothing left beside it.
  fs::create_directories(dir.file("hub/.git/objects"));
  write_file(dir.file("hub/README.md"), "the model card");
  write_file(dir.file("hub/.git/objects/blob"), "a large object");
  fs::create_hard_link(dir.file("hub/.git/objects/blob"), dir.file("blob_link"));
  auto inode = [](const std::string& path) {
    struct stat info {};
    return ::stat(path.c_str(), &info) == 0 ? static_cast<long long>(info.st_ino) : -1LL;
  };
  const long long blob = inode(dir.file("hub/.git/objects/blob"));
  fs::permissions(dir.file("hub"), fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec);
  auto hub = run_command({bin("ddp-export"), dir.file("out"), "-o", dir.file("hub")}, std::chrono::seconds(120));
  CHECK(hub.exit_code == 0);
  CHECK((fs::status(dir.file("hub")).permissions() & fs::perms::all) ==
        (fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec));  // 0750 kept (was: the umask's)
  CHECK(read_file(dir.file("hub/README.md")) == "the model card");
  CHECK(fs::exists(dir.file("hub/model.safetensors")));
  CHECK(inode(dir.file("hub/.git/objects/blob")) == blob);
  CHECK(fs::hard_link_count(dir.file("blob_link")) == 2);
  for (const auto& entry : fs::directory_iterator(dir.path()))
    CHECK(entry.path().filename().string().find(".hub.export-") == std::string::npos);
  auto here = run_shell("cd " + dir.file("shards") + " && " + bin("ddp-export") + " " + dir.file("out") + " -o .",
                        std::chrono::seconds(60));
  CHECK(here.exit_code == 2);
  CHECK_THAT(here.err, Contains("-o . is the current directory"));
  fs::create_directories(dir.file("empty"));
  write_file(dir.file("empty/config.yaml"), read_file(dir.file("out/config.yaml")));
  auto nothing = run_command({bin("ddp-export"), dir.file("empty")}, std::chrono::seconds(60));
  CHECK(nothing.exit_code == 2);
  CHECK_THAT(nothing.err, Contains(dir.file("empty") + " has neither a checkpoint nor model.pt to export"));
  auto size = run_command({bin("ddp-export"), dir.file("out"), "--max-shard-size", "5 parsecs"}, std::chrono::seconds(60));
  CHECK(size.exit_code == 2);
  CHECK_THAT(size.err, Contains("--max-shard-size: expected a size such as 5GB, 500MB or 100KB, got '5 parsecs'"));

  // A finished run whose newest checkpoint is older than its end: the end is exported, the weights
  // it trained (was: the older checkpoint, without a word).
  fs::create_directories(dir.file("aside"));
  for (const auto& entry : fs::directory_iterator(dir.file("out/checkpoints")))
    if (entry.path().filename().string().rfind("step_0000000040", 0) == 0)
      fs::rename(entry.path(), dir.file("aside") / entry.path().filename());
  auto end = run_command({bin("ddp-export"), dir.file("out"), "-o", dir.file("end")}, std::chrono::seconds(120));
  INFO(end.out << end.err);
  CHECK(end.exit_code == 0);
  CHECK_THAT(end.out, Contains("exported the end of the run, step 40 (" + dir.file("out/model.pt") +
                               "; its newest checkpoint is of step 20)"));
  CHECK(read_file(dir.file("end/model.safetensors")) == read_file(dir.file("out/model.safetensors")));
  for (const auto& entry : fs::directory_iterator(dir.file("aside")))
    fs::rename(entry.path(), dir.file("out/checkpoints") / entry.path().filename());
  // Below, a run that did not finish (its end record gone): checkpoints are what there is.
  const std::string metrics = read_file(dir.file("out/metrics.jsonl"));
  const std::size_t last = metrics.rfind('\n', metrics.size() - 2);
  REQUIRE(metrics.substr(last).find("exit_status") != std::string::npos);
  write_file(dir.file("out/metrics.jsonl"), metrics.substr(0, last + 1));

  // A newest manifest whose step disagrees with its name is ignored, and the one before it exported.
  const std::string manifest = dir.file("out/checkpoints/step_0000000040.json");
  const std::string as_written = read_file(manifest);
  REQUIRE(as_written.find("step: 40\n") != std::string::npos);
  write_file(manifest, std::string(as_written).replace(as_written.find("step: 40\n"), 9, "step: 38\n"));
  auto disagreeing = run_command({bin("ddp-export"), dir.file("out"), "-o", dir.file("disagreeing")},
                                 std::chrono::seconds(120));
  INFO(disagreeing.out << disagreeing.err);
  CHECK(disagreeing.exit_code == 0);
  CHECK_THAT(disagreeing.out, Contains("exported the checkpoint of step 20"));
  CHECK_THAT(disagreeing.err, Contains("ignoring " + manifest + ": it records step 38 but is named for step 40"));
  write_file(manifest, as_written);

  // A damaged newest checkpoint: the one before it is exported, and the warning is the tool's line on stderr.
  const std::string common = dir.file("out/checkpoints/step_0000000040.common.pt");
  REQUIRE(fs::exists(common));
  fs::resize_file(common, fs::file_size(common) / 2);
  auto fallback = run_command({bin("ddp-export"), dir.file("out"), "-o", dir.file("fallback")}, std::chrono::seconds(120));
  INFO(fallback.out << fallback.err);
  CHECK(fallback.exit_code == 0);
  CHECK_THAT(fallback.out, Contains("exported the checkpoint of step 20") && !Contains("skipping"));
  CHECK_THAT(fallback.err, StartsWith("ddp-export: warning: skipping checkpoint " + dir.file("out/checkpoints/")));

  // None left that reads: model.pt is exported, said in the tool's words (not a trainer's "training starts afresh").
  const std::string older = dir.file("out/checkpoints/step_0000000020.common.pt");
  REQUIRE(fs::exists(older));
  fs::resize_file(older, fs::file_size(older) / 2);
  auto weights = run_command({bin("ddp-export"), dir.file("out"), "-o", dir.file("weights")}, std::chrono::seconds(120));
  INFO(weights.out << weights.err);
  CHECK(weights.exit_code == 0);
  CHECK_THAT(weights.err, Contains("ddp-export: warning: no checkpoint in " + dir.file("out/checkpoints") +
                                   " could be read; exporting " + dir.file("out/model.pt")) &&
                              !Contains("afresh"));
}

}  // namespace DDP_TEST_FILE
