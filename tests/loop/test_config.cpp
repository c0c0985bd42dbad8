#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>

#include "ddp/common/error.h"
#include "ddp/common/text.h"
#include "ddp/loop/global_batch.h"
#include "ddp/loop/train_config.h"
#include "support/subprocess.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using Catch::Contains;
using Catch::Equals;
using Catch::StartsWith;
using ddp::ConfigError;
using ddp::parse_train_config;
using ddp::TrainConfig;

namespace {

TrainConfig parse(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  return parse_train_config(yaml, overrides);
}

// docs/config.md is hand-written down to this line and generated after it.
const std::string kDocsMarker =
    "<!-- Everything below is config_reference_markdown(); regenerate it with "
    "DDP_UPDATE_DOCS=1 build/bin/test_loop \"[docs]\" -->";

}  // namespace

TEST_CASE("an empty document gives the defaults", "[config]") {
  for (const std::string text : {"", "# nothing set\n", "train:\n", "---\n"}) {
    TrainConfig config = parse(text);
    TrainConfig defaults;
    CHECK(ddp::to_yaml(config) == ddp::to_yaml(defaults));
    CHECK(config.train.batch_size == 64);
    CHECK(config.optim.lr == 0.01);
    CHECK(config.model.mlp.hidden == std::vector<int64_t>{256, 128});
    CHECK(config.dist.backend == "auto");
    CHECK(config.checkpoint.resume == "auto");
    CHECK(config.run.output_dir.empty());
  }
}

TEST_CASE("a full document sets every kind of value", "[config]") {
  TrainConfig config = parse(R"(
run: {name: exp1, output_dir: /tmp/exp1, seed: 7}
dist: {backend: gloo, timeout_s: 60, bucket_cap_mb: 4.5, overlap: false}
data: {dataset: synthetic, path: "", mean: 0.5, std: 0.25, eval_split: none,
       synthetic_train_samples: 100, synthetic_test_samples: 10, workers: 2, prefetch: 4}
sampler: {shuffle: false, seed: 3, drop_last: true}
model:
  name: mlp
  num_classes: 10
  batchnorm: false
  relu: false
  hidden: [512, 256, 64]
optim: {name: adamw, lr: 3e-4, momentum: 0, weight_decay: 0.01, beta1: 0.8, beta2: 0.99, eps: 1e-6, lr_scaling: sqrt}
schedule: {name: cosine, warmup_steps: 100, step_size: 10, gamma: 0.5, min_lr: 1e-5}
train: {epochs: 3, max_steps: 500, batch_size: 32, grad_accum_steps: 4, clip_grad_norm: 1.0, log_every: 10}
eval: {every_epochs: 0, every_steps: 100, batch_size: 256, at_start: false}
checkpoint: {every_steps: 200, every_epochs: 0, keep_last: 5, resume: never}
)");
  CHECK(config.run.name == "exp1");
  CHECK(config.run.output_dir == "/tmp/exp1");
  CHECK(config.run.seed == 7);
  CHECK(config.dist.backend == "gloo");
  CHECK(config.dist.bucket_cap_mb == 4.5);
  CHECK_FALSE(config.dist.overlap);
  CHECK(config.data.dataset == "synthetic");
  CHECK(config.data.path.empty());
  CHECK(config.data.prefetch == 4);
  CHECK(config.sampler.drop_last);
  CHECK(config.model.mlp.hidden == std::vector<int64_t>{512, 256, 64});
  CHECK(config.optim.name == "adamw");
  CHECK(config.optim.lr == 3e-4);
  CHECK(config.optim.eps == 1e-6);
  CHECK(config.schedule.min_lr == 1e-5);
  CHECK(config.train.grad_accum_steps == 4);
  CHECK(config.train.clip_grad_norm == 1.0);
  CHECK(config.eval.every_steps == 100);
  CHECK_FALSE(config.eval.at_start);
  CHECK(config.checkpoint.keep_last == 5);
  CHECK(config.checkpoint.resume == "never");
}

TEST_CASE("out of memory advises the settings a run has not set yet", "[config][errors]") {
  const std::string plain = ddp::out_of_memory_advice(parse(""));
  CHECK_THAT(plain, StartsWith("without dist.shard every rank holds the whole model") &&
                        Contains("; or lower train.batch_size") && !Contains("embedding"));
  const std::string zero1 = ddp::out_of_memory_advice(parse("dist: {shard: optimizer}"));
  CHECK_THAT(zero1, StartsWith("dist.shard optimizer leaves every rank the whole parameters: dist.shard parameters"));
  CHECK_THAT(ddp::out_of_memory_advice(parse("dist: {shard: parameters}")), Equals("lower train.batch_size"));
  const std::string replicated = ddp::out_of_memory_advice(parse("model: {name: dlrm}"));
  CHECK_THAT(replicated, Contains("model.embedding_sharding table or row splits the embedding tables"));
  // Tables split already: the rank's share is too large, and naming row again would not help.
  const std::string rows =
      ddp::out_of_memory_advice(parse("model: {name: dlrm, embedding_sharding: row}\ndist: {shard: parameters}"));
  CHECK_THAT(rows, Equals("model.embedding_sharding row splits the embedding tables already, and this rank's share is "
                          "too large: fewer model.embedding_rows, or more ranks; or lower train.batch_size"));
}

TEST_CASE("unknown keys are errors with a hint", "[config]") {
  REQUIRE_THROWS_AS(parse("train: {bach_size: 32}"), ConfigError);
  REQUIRE_THROWS_WITH(parse("train: {bach_size: 32}"),
                      Equals("train.bach_size: unknown key (did you mean train.batch_size?)"));
  REQUIRE_THROWS_WITH(parse("trian: {epochs: 2}"), Equals("trian: unknown key (did you mean train?)"));
  // A section's name spelt out: the section (was optim.lr, the leaf nearest the word).
  REQUIRE_THROWS_WITH(parse("optimizer: {lr: 0.1}"), Equals("optimizer: unknown key (did you mean optim?)"));
  REQUIRE_THROWS_WITH(parse("training: {epochs: 2}"), Equals("training: unknown key (did you mean train?)"));
  REQUIRE_THROWS_WITH(parse("batch_size: 32"),
                      Equals("batch_size: unknown key (did you mean train.batch_size or eval.batch_size?)"));
  REQUIRE_THROWS_WITH(parse("foo: {bar: 1}"), Contains("foo: unknown key (valid sections: run, dist, data, sampler"));
  REQUIRE_THROWS_WITH(parse("train: {xyz: 1}"),
                      Contains("train.xyz: unknown key (valid keys of train: epochs, max_steps, batch_size"));
  REQUIRE_THROWS_WITH(parse("train: {epochs: 1, epochs: 2}"), Equals("train.epochs: duplicate key"));
  // A YAML merge key, which YAML 1.2 (yaml-cpp) does not have: said as such (was: the valid keys).
  REQUIRE_THROWS_WITH(parse("defaults: &d {epochs: 2}\ntrain:\n  <<: *d\n"),
                      Contains("train.<<: unknown key (YAML merge keys, `<<: *anchor`, are not read here"));
  // A choice in other case: the one it spells (was: "did you mean adam?" for AdamW).
  REQUIRE_THROWS_WITH(parse("optim: {name: AdamW}"), Contains("(did you mean adamw?)"));
  // One key spelled both ways in one file: the last one silently won.
  for (const char* twice : {"train: {epochs: 3}\ntrain.epochs: 5\n", "train.epochs: 5\ntrain: {epochs: 3}\n"})
    REQUIRE_THROWS_WITH(parse(twice), Equals("train.epochs: duplicate key (written both in its section and as "
                                             "train.epochs)"));
  CHECK(parse("train.epochs: 5\ntrain: {max_steps: 3}\n").train.epochs == 5);
}

TEST_CASE("sections must be maps and values must be scalars", "[config]") {
  REQUIRE_THROWS_WITH(parse("train: 3"), Equals("train: expected a map of keys (a section), got 3"));
  REQUIRE_THROWS_WITH(parse("train: [1, 2]"), Contains("train: expected a map of keys"));
  REQUIRE_THROWS_WITH(parse("train: {batch_size: {a: 1}}"), Equals("train.batch_size: expected an integer, got a map"));
  REQUIRE_THROWS_WITH(parse("- train"), Contains("config: expected a map of sections"));
}

TEST_CASE("wrong types name the path, the value and the expectation", "[config]") {
  REQUIRE_THROWS_WITH(parse("optim: {lr: fast}"), Equals("optim.lr: expected a number, got \"fast\""));
  REQUIRE_THROWS_WITH(parse("train: {batch_size: 3.5}"), Equals("train.batch_size: expected an integer, got 3.5"));
  REQUIRE_THROWS_WITH(parse("train: {batch_size: 99999999999999999999}"), Contains("(out of range)"));
  REQUIRE_THROWS_WITH(parse("optim: {lr: 1e400}"), Equals("optim.lr: expected a number, got \"1e400\" (out of range)"));
  REQUIRE_THROWS_WITH(parse("optim: {lr: .inf}"), !Contains("out of range"));  // infinite as written: no number
  // Too small for a double: strtod reads 0, and the range check said "got 0" of what was not written as 0.
  REQUIRE_THROWS_WITH(parse("optim: {lr: 1e-400}"),
                      Equals("optim.lr: expected a number, got 1e-400 (out of range: too small, it reads as 0)"));
  CHECK_NOTHROW(parse("optim: {weight_decay: 0.0e-400}"));  // 0 as written
  // Hexadecimal: strtod took a float's (0x1p-3) while the integers refused theirs; both are refused.
  REQUIRE_THROWS_WITH(parse("optim: {lr: 0x1p-3}"),
                      Equals("optim.lr: expected a number, got \"0x1p-3\" (write it in decimal)"));
  REQUIRE_THROWS_WITH(parse("train: {batch_size: 0x10}"),
                      Equals("train.batch_size: expected an integer, got \"0x10\" (write it in decimal)"));
  // A time-out no rendezvous could meet.
  REQUIRE_THROWS_WITH(parse("dist: {timeout_s: 0.001}"), Equals("dist.timeout_s: must be in [1, 604800], got 0.001"));
  REQUIRE_THROWS_WITH(parse("train: {batch_size:}"), Equals("train.batch_size: expected an integer, got null"));
  // Booleans are true/false only: YAML 1.1's yes/no and 1/0 are refused rather than guessed.
  REQUIRE_THROWS_WITH(parse("sampler: {shuffle: yes}"), Equals("sampler.shuffle: expected true or false, got \"yes\""));
  REQUIRE_THROWS_WITH(parse("sampler: {shuffle: 1}"), Equals("sampler.shuffle: expected true or false, got 1"));
  REQUIRE_THROWS_WITH(parse("run: {name: [a, b]}"), Equals("run.name: expected a string, got a list"));
  REQUIRE_THROWS_WITH(parse("run: {output_dir: }"), Contains("run.output_dir: expected a string, got null"));
  REQUIRE_THROWS_WITH(parse("model: {hidden: 256}"), Contains("model.hidden: expected a list of integers"));
  REQUIRE_THROWS_WITH(parse("model: {hidden: [256, x]}"), Equals("model.hidden[1]: expected an integer, got \"x\""));
  CHECK(parse("sampler: {shuffle: False}").sampler.shuffle == false);
  CHECK(parse("run: {name: 123}").run.name == "123");
  CHECK(parse("train: {batch_size: +8}").train.batch_size == 8);
}

TEST_CASE("ranges and choices are checked", "[config]") {
  REQUIRE_THROWS_WITH(parse("optim: {lr: -0.1}"), Equals("optim.lr: must be in (0, 1e+06], got -0.1"));
  REQUIRE_THROWS_WITH(parse("train: {batch_size: 0}"), Equals("train.batch_size: must be in [1, 1e+07], got 0"));
  REQUIRE_THROWS_WITH(parse("optim: {momentum: 1}"), Equals("optim.momentum: must be in [0, 1), got 1"));
  REQUIRE_THROWS_WITH(parse("model: {hidden: [8, 0]}"), Equals("model.hidden[1]: must be in [1, 1e+06], got 0"));
  REQUIRE_THROWS_WITH(parse("run: {name: \"\"}"), Equals("run.name: must not be empty"));
  REQUIRE_THROWS_WITH(parse("dist: {backend: mpi}"),
                      Equals("dist.backend: must be one of auto, gloo, nccl, got \"mpi\""));
  // Every problem is reported, one complete line each.
  REQUIRE_THROWS_WITH(parse("optim: {lr: 0}\ntrain: {epochs: 0}"),
                      Equals("optim.lr: must be in (0, 1e+06], got 0\ntrain.epochs: must be in [1, 1e+06], got 0"));
}

TEST_CASE("npy, csv and torchscript configs name what is missing or contradictory", "[config]") {
  REQUIRE_THROWS_WITH(parse("data: {dataset: npy, path: x.npy, eval_split: none}"),
                      Equals("data.labels: must name the labels .npy when data.dataset is npy"));
  REQUIRE_THROWS_WITH(parse("data: {dataset: npy, path: x.npy, labels: y.npy}"),
                      Equals("data.eval_path: must name the test split (or set data.eval_fraction, or "
                             "data.eval_split: none)"));
  REQUIRE_THROWS_WITH(parse("data: {dataset: csv, path: t.csv, eval_path: e.csv, eval_fraction: 0.1}"),
                      Equals("data.eval_path: set it or data.eval_fraction, not both"));
  REQUIRE_THROWS_WITH(parse("data: {dataset: npy, path: x.npy, labels: y.npy, eval_path: e.npy}"),
                      Equals("data.eval_labels: must name the labels .npy of data.eval_path"));
  REQUIRE_THROWS_WITH(parse("data: {eval_fraction: 1}"), Contains("data.eval_fraction: must be in [0, 1), got 1"));
  REQUIRE_THROWS_WITH(parse("model: {name: torchscript}"),
                      Equals("model.path: must name the module file when model.name is torchscript"));
  REQUIRE_THROWS_WITH(parse("model: {name: torchscript, path: m.pt, sync_batchnorm: true}"),
                      Equals("model.sync_batchnorm: is not available for TorchScript modules"));
  REQUIRE_THROWS_WITH(parse("dist: {backend: nccl, device: cpu}"),
                      Equals("dist.backend: nccl sums CUDA tensors, and dist.device is cpu; use gloo"));
  REQUIRE_THROWS_WITH(parse("train: {loss: hinge}"), Contains("train.loss: must be one of cross_entropy, mse, "
                                                              "bce_with_logits"));
  CHECK_NOTHROW(parse("data: {dataset: csv, path: t.csv, eval_fraction: 0.2}\nmodel: {name: torchscript, path: m.pt}"));
  // npy's labels files given to a table or a click log were read nowhere, without a word.
  REQUIRE_THROWS_WITH(parse("data: {dataset: csv, path: t.csv, labels: y.npy, eval_fraction: 0.2}"),
                      Equals("data.labels: only data.dataset npy reads a labels file, and data.dataset is csv: "
                             "leave it out"));
  // Without data.eval_path the labels went unread (the eval split was data.eval_fraction's), silently.
  REQUIRE_THROWS_WITH(parse("data: {dataset: npy, path: x.npy, labels: y.npy, eval_labels: e.npy}"),
                      Contains("data.eval_labels: labels data.eval_path's samples, and data.eval_path is not set"));
  REQUIRE_THROWS_WITH(parse("data: {dataset: criteo, path: log.tsv, eval_path: e.tsv, eval_labels: e.npy}"),
                      Contains("data.eval_labels: only data.dataset npy reads a labels file, and data.dataset is "
                               "criteo: leave it out"));
}

TEST_CASE("train.task chooses the task, and a key it does not train with is named at load", "[config]") {
  CHECK(parse("").task.task == "classification");
  CHECK(parse("train: {task: regression, loss: mse}").task.task == "regression");
  CHECK_NOTHROW(parse("train: {loss: bce_with_logits}"));
  CHECK(parse("data: {dataset: graph, path: g, eval_split: val}\nmodel: {name: graphsage}\n"
              "train: {task: node_classification}").model.name == "graphsage");
  CHECK(parse("data: {dataset: tokens, path: t.bin, eval_path: v.bin}\nmodel: {name: gpt}\n"
              "train: {task: causal_lm}").model.name == "gpt");
  REQUIRE_THROWS_WITH(parse("data: {dataset: tokens, path: t.bin}\nmodel: {name: gpt}\ntrain: {task: causal_lm}"),
                      Contains("data.eval_path: must name the held-out token file or glob"));
  REQUIRE_THROWS_WITH(parse("data: {dataset: tokens, path: t.bin, eval_split: none, token_dtype: int16}\n"
                            "model: {name: gpt}\ntrain: {task: causal_lm}"),
                      Contains("data.token_dtype: must be uint16 or uint32 (or empty), got \"int16\""));
  REQUIRE_THROWS_WITH(parse("data: {dataset: tokens, path: t.bin, eval_split: none}\n"
                            "model: {name: gpt, n_embd: 100, n_head: 3}\ntrain: {task: causal_lm}"),
                      Contains("model.n_head: model.n_embd 100 must divide by it (3 heads)"));
  CHECK(parse("dist: {shard: parameters}").mesh.shard == "parameters");
  CHECK(parse("dist: {shard: gradients}").mesh.shard == "gradients");
  CHECK(parse("dist: {shard: optimizer}").mesh.shard == "optimizer");
  REQUIRE_THROWS_WITH(parse("train: {task: clasification}"),
                      Equals("train.task: must be one of causal_lm, classification, node_classification, regression, got "
                             "\"clasification\" (did you mean classification?)"));
  REQUIRE_THROWS_WITH(parse("data: {dataset: nyp}"), Contains("data.dataset: must be one of criteo, csv, graph, idx, npy, "
                                                              "synthetic, tokens, got \"nyp\" (did you mean npy?)"));
  REQUIRE_THROWS_WITH(parse("train: {task: regression}"),
                      Equals("train.loss: cross_entropy trains with train.task: causal_lm, classification or "
                             "node_classification, not regression (train.task regression takes train.loss: mse)"));
  REQUIRE_THROWS_WITH(parse("train: {loss: mse}"), Contains("train.loss: mse trains with train.task: regression, not "
                                                            "classification"));
  REQUIRE_THROWS_WITH(parse("data: {dataset: graph, path: g}"),
                      Contains("data.dataset: graph trains with train.task: node_classification, not classification"));
  REQUIRE_THROWS_WITH(parse("model: {name: graphsage}"),
                      Contains("model.name: graphsage trains with train.task: node_classification, not classification"));
  REQUIRE_THROWS_WITH(parse("train: {task: node_classification}"),
                      Contains("data.dataset: idx trains with train.task: classification or regression, not "
                               "node_classification (train.task node_classification takes data.dataset: graph)") &&
                          Contains("model.name: convnet trains with train.task: classification or regression"));
}

TEST_CASE("every count and duration has an upper bound that names it (issue 12, item 9)", "[config]") {
  REQUIRE_THROWS_WITH(parse("train: {batch_size: 9223372036854775807}"),
                      Equals("train.batch_size: must be in [1, 1e+07], got 9223372036854775807"));
  REQUIRE_THROWS_WITH(parse("train: {epochs: 9000000000000000000}"), Contains("train.epochs: must be in [1, 1e+06]"));
  REQUIRE_THROWS_WITH(parse("dist: {timeout_s: 1e300}"), Contains("dist.timeout_s:") && Contains("604800"));
  REQUIRE_THROWS_WITH(parse("data: {workers: 100000}"), Contains("data.workers: must be in [1, 256]"));
  // Every numeric key but the seeds (any 64-bit value is a seed) has a finite upper bound.
  for (const auto& line : ddp::split(ddp::config_reference_markdown(), '\n')) {
    bool numeric = line.find("| integer |") != std::string::npos || line.find("| number |") != std::string::npos ||
                   line.find("| list of integers |") != std::string::npos;
    if (!numeric || line.find("seed` |") != std::string::npos) continue;
    INFO(line);
    bool bounded = line.find("in [") != std::string::npos || line.find("in (") != std::string::npos ||
                   line.find("≤ ") != std::string::npos || line.find("(< ") != std::string::npos;
    CHECK(bounded);
  }
}

TEST_CASE("cross-field rules", "[config]") {
  REQUIRE_THROWS_WITH(parse("optim: {nesterov: true, momentum: 0}"),
                      Equals("optim.nesterov: needs optim.momentum > 0"));
  REQUIRE_THROWS_WITH(parse("optim: {nesterov: true, name: adam}"), Contains("optim.nesterov: only sgd"));
  REQUIRE_THROWS_WITH(parse("model: {name: mlp, hidden: []}"),
                      Equals("model.hidden: must not be empty when model.name is mlp"));
  CHECK(parse("model: {name: convnet, hidden: []}").model.mlp.hidden.empty());
  REQUIRE_THROWS_WITH(parse("data: {dataset: idx, path: \"\"}"), Contains("data.path: must not be empty"));
}

TEST_CASE("each model family reads its own keys, and a key two families read reaches both (Note [Model families])",
          "[config]") {
  TrainConfig config = parse("model: {name: mlp, hidden: [8], dropout: 0.5, aggregation: max}",
                             {"model.channels_last=false"});
  CHECK(config.model.graphsage.hidden == std::vector<int64_t>{8});
  CHECK(config.model.mlp.hidden == std::vector<int64_t>{8});
  CHECK(config.model.graphsage.dropout == 0.5);
  CHECK(config.model.gpt.dropout == 0.5);
  CHECK(config.model.graphsage.aggregation == "max");
  CHECK_FALSE(config.model.convnet.channels_last);
  CHECK_FALSE(config.model.torchscript.channels_last);
  // Written out once each, and read back the same.
  std::string yaml = ddp::to_yaml(config);
  CHECK(ddp::test::count_lines(yaml, "  hidden: [8]") == 1);
  CHECK(ddp::to_yaml(parse(yaml)) == yaml);
}

TEST_CASE("a Llama's shape is checked before anything runs: heads, key/value heads and rope scaling", "[config]") {
  const std::string llama = "data: {dataset: tokens, path: t.bin, eval_split: none}\ntrain: {task: causal_lm}\nmodel: {name: llama, dim: 48, ";
  CHECK(parse(llama + "n_head: 6, n_kv_heads: 2}").model.llama.n_kv_heads == 2);
  REQUIRE_THROWS_WITH(parse(llama + "n_head: 5}"),
                      Equals("model.n_head: model.dim 48 must divide by it into heads of an even width (5 heads)"));
  REQUIRE_THROWS_WITH(parse(llama + "n_head: 16}"),  // heads of 3: rotary positions pair a head's two halves
                      Equals("model.n_head: model.dim 48 must divide by it into heads of an even width (16 heads)"));
  REQUIRE_THROWS_WITH(parse(llama + "n_head: 6, n_kv_heads: 4}"),
                      Equals("model.n_kv_heads: model.n_head 6 must divide by it (4 key/value heads)"));
  REQUIRE_THROWS_WITH(parse(llama + "n_head: 6, rope_scaling: llama3, rope_low_freq_factor: 4, rope_high_freq_factor: 2}"),
                      Equals("model.rope_high_freq_factor: must be above model.rope_low_freq_factor for rope_scaling "
                             "llama3"));
  REQUIRE_THROWS_WITH(parse(llama + "n_head: 6, rope_scaling: yarn}"), Contains("model.rope_scaling: must be one of none, llama3"));
}

TEST_CASE("run.name names one directory: it cannot leave runs/ (issue 22, item 16)", "[config]") {
  for (const char* name : {"..", ".", "../../x", "a/b", "/abs"})
    REQUIRE_THROWS_WITH(parse(std::string("run: {name: \"") + name + "\"}"),
                        Equals("run.name: must name one directory under runs/ (no '/', not '.' or '..'), got '" +
                               std::string(name) + "'; run.output_dir takes a path"));
  CHECK(parse("run: {name: exp-1.2_b}").run.name == "exp-1.2_b");
  CHECK(parse("run: {name: my run}").run.name == "my run");
  CHECK(parse("run: {name: a/b, output_dir: /tmp/x}").run.name == "a/b");  // a label then, not a path
}

TEST_CASE("mesh settings that are unknown, or split nothing, are refused, naming the key", "[config]") {
  CHECK(parse("dist: {pipeline: 2}").mesh.pipeline == 2);
  CHECK(parse("dist: {pipeline: 2, shard: parameters}").mesh.shard == "parameters");
  REQUIRE_THROWS_WITH(parse("dist: {schedule: zb}"), Contains("dist.schedule"));
  REQUIRE_THROWS_WITH(parse("dist: {data_shard: 2}"),
                      Equals("dist.data_shard: splits nothing with dist.shard: none; set dist.shard"));
  CHECK(parse("dist: {data_shard: 2, shard: optimizer}").mesh.data_shard == 2);
  REQUIRE_THROWS_WITH(parse("dist: {shard: gradients, shard_overlap: true}"),
                      Equals("dist.shard_overlap: applies to dist.shard: parameters only (this run has dist.shard: "
                             "gradients)"));
  CHECK(parse("dist: {shard: parameters, shard_overlap: true}").mesh.shard_overlap);
  CHECK(parse("dist: {data_replicate: 4}").mesh.data_replicate == 4);  // checked against the world at start
  REQUIRE_THROWS_WITH(parse("dist: {pipelin: 1}"), Contains("did you mean dist.pipeline?"));
}

TEST_CASE("a Hugging Face config.json's key names ours (was: the nearest spelling, model.hidden for hidden_size)",
          "[config]") {
  REQUIRE_THROWS_WITH(parse("model: {hidden_size: 64}"),
                      Equals("model.hidden_size: unknown key (Hugging Face's hidden_size is model.dim for a llama, "
                             "model.n_embd for a gpt here; model.init_from reads a config.json's)"));
  REQUIRE_THROWS_WITH(parse("model: {num_key_value_heads: 2}"),
                      Contains("(Hugging Face's num_key_value_heads is model.n_kv_heads here;"));
}

TEST_CASE(
    "keys that do nothing in this run (pipeline keys without a pipeline, a carve no evaluation reads, a mean no "
    "normalisation reads) are notices, not errors, one line each",
    "[config]") {
  using Notices = std::vector<std::string>;
  CHECK(ddp::config_notices(parse("")) == Notices{});
  CHECK(ddp::config_notices(parse("dist: {pipeline: 2, microbatches: 4, schedule: gpipe, pipeline_split: h.1}")) ==
        Notices{});
  CHECK(ddp::config_notices(parse("dist: {microbatches: 4, schedule: gpipe, pipeline_split: h.1}")) ==
        Notices{"dist.microbatches: does nothing without a pipeline (dist.pipeline is 1)",
                "dist.schedule: does nothing without a pipeline (dist.pipeline is 1)",
                "dist.pipeline_split: does nothing without a pipeline (dist.pipeline is 1)"});
  // SyncBatchNorm under stages: a microbatch's statistics (was: accepted without a word).
  CHECK(ddp::config_notices(parse("model: {sync_batchnorm: true}\ndist: {pipeline: 2}")) ==
        Notices{"model.sync_batchnorm: with dist.pipeline 2, the BatchNorm statistics are each microbatch's over the "
                "replicas, not the step's global batch's (as with train.grad_accum_steps)"});
  CHECK(ddp::config_notices(parse("model: {sync_batchnorm: true}")) == Notices{});
  // A carve that no evaluation reads: its samples are trained on by no one (was: without a word).
  CHECK(ddp::config_notices(parse("data: {dataset: npy, path: /x.npy, labels: /y.npy, eval_fraction: 0.5, "
                                  "eval_split: none}")) ==
        Notices{"data.eval_fraction: holds out 50% of data.path's samples, which data.eval_split none never "
                "evaluates: they are not trained on either (the training split stays the same whether or not it is "
                "evaluated); set data.eval_fraction 0 to train on every sample"});
  // A mean and std that no normalisation reads (auto is global for npy): said (was: dropped).
  CHECK(ddp::config_notices(parse("data: {dataset: npy, path: /x.npy, labels: /y.npy, eval_split: none, mean: 100, "
                                  "std: 5}")) ==
        Notices{"data.mean: does nothing with data.normalize auto (global for data.dataset npy): set data.normalize "
                "fixed to normalise by data.mean and data.std",
                "data.std: does nothing with data.normalize auto (global for data.dataset npy): set data.normalize "
                "fixed to normalise by data.mean and data.std"});
  CHECK(ddp::config_notices(parse("data: {dataset: npy, path: /x.npy, labels: /y.npy, eval_split: none, mean: 100, "
                                  "normalize: fixed}")) == Notices{});
  // A model family's key set for another: a GPT's n_embd for a Llama (whose width is model.dim)
  // trained a 768-wide Llama where 64 was meant, without a word (Note [Keys a choice reads]).
  const std::string lm =
      "data: {dataset: tokens, path: /t.bin, eval_split: none}\ntrain: {task: causal_lm, loss: cross_entropy}\n";
  CHECK(ddp::config_notices(parse(lm + "model: {name: llama, n_layer: 3, n_embd: 64, dropout: 0.2}")) ==
        Notices{"model.dropout: does nothing with model.name llama (graphsage and gpt read it)",
                "model.n_embd: does nothing with model.name llama (gpt reads it)"});
  CHECK(ddp::config_notices(parse(lm + "model: {name: gpt, n_layer: 3, n_embd: 64, n_head: 4, dropout: 0.2}")) ==
        Notices{});
  // rope_scaling llama3's numbers without it (was: unread without a word); dropout 1 zeroes everything.
  CHECK(ddp::config_notices(parse(lm + "model: {name: llama, rope_factor: 32}")) ==
        Notices{"model.rope_factor: does nothing with model.rope_scaling none (llama3 reads it)"});
  CHECK(ddp::config_notices(parse(lm + "model: {name: llama, rope_scaling: llama3, rope_factor: 32}")) == Notices{});
  // Llama's rule for the MLP's width with a width given (model.init_from's intermediate_size): unread.
  CHECK(ddp::config_notices(parse(lm + "model: {name: llama, ffn_dim: 96, multiple_of: 32}")) ==
        Notices{"model.multiple_of: does nothing with model.ffn_dim 96 (Llama's rule for the MLP's width reads it "
                "where model.ffn_dim is 0; a model.init_from directory's config.json gives the width as "
                "intermediate_size)"});
  CHECK(ddp::config_notices(parse(lm + "model: {name: llama, multiple_of: 32, ffn_dim_multiplier: 1.3}")) == Notices{});
  REQUIRE_THROWS_WITH(parse(lm + "model: {name: gpt, dropout: 1}"), Contains("model.dropout:"));
  // Keys another dataset or model reads (were: taken without a word).
  CHECK(ddp::config_notices(parse("data: {dataset: idx, path: /d, eval_fraction: 0.5, eval_path: /e}\n"
                                  "model: {name: mlp, path: /m.pt}")) ==
        Notices{"data.eval_path: does nothing with data.dataset idx (npy, csv, criteo and tokens read it)",
                "data.eval_fraction: does nothing with data.dataset idx (npy, csv and criteo split by it)",
                "model.path: does nothing with model.name mlp (torchscript reads it)"});
  // An optimizer's or a schedule's key set for another (were: taken without a word).
  CHECK(ddp::config_notices(parse("optim: {name: adam, momentum: 0.5}\nschedule: {gamma: 0.5, min_lr: 0.001}")) ==
        Notices{"optim.momentum: does nothing with optim.name adam (sgd reads it)",
                "schedule.gamma: does nothing with schedule.name constant (step reads it)",
                "schedule.min_lr: does nothing with schedule.name constant (cosine reads it)"});
  CHECK(ddp::config_notices(parse("optim: {name: sgd, beta1: 0.5}")) ==
        Notices{"optim.beta1: does nothing with optim.name sgd (adam and adamw read it)"});
  CHECK(ddp::config_notices(parse("optim: {name: adamw, beta1: 0.5}\nschedule: {name: step, gamma: 0.5}")) ==
        Notices{});
  // A cosine's floor above the lr it decays from would climb (was: lr 4.8 and a diverged run, exit 0).
  REQUIRE_THROWS_WITH(parse("optim: {lr: 0.01}\nschedule: {name: cosine, min_lr: 5}"),
                      Contains("schedule.min_lr: 5 is above optim.lr 0.01, the lr the cosine decays from"));
  CHECK_NOTHROW(parse("optim: {lr: 0.01}\nschedule: {name: cosine, min_lr: 0.01}"));
}

TEST_CASE("set overrides use the same paths and messages", "[config]") {
  TrainConfig config = parse("train: {epochs: 5}", {"train.epochs=3", "optim.lr = 0.5", "model.hidden=[512,64]",
                                                     "sampler.shuffle=false", "run.name=my run",
                                                     "run.output_dir=", "eval={batch_size: 10, at_start: false}"});
  CHECK(config.train.epochs == 3);
  CHECK(config.optim.lr == 0.5);
  CHECK(config.model.mlp.hidden == std::vector<int64_t>{512, 64});
  CHECK_FALSE(config.sampler.shuffle);
  CHECK(config.run.name == "my run");
  CHECK(config.run.output_dir.empty());
  CHECK(config.eval.batch_size == 10);
  CHECK_FALSE(config.eval.at_start);
  CHECK(parse("", {"train.epochs=2", "train.epochs=4"}).train.epochs == 4);

  REQUIRE_THROWS_WITH(parse("", {"train.bach_size=3"}),
                      Equals("train.bach_size: unknown key (did you mean train.batch_size?)"));
  REQUIRE_THROWS_WITH(parse("", {"foo.bar=1"}), Contains("foo.bar: unknown key (valid sections: run, dist"));
  REQUIRE_THROWS_WITH(parse("", {"train.batch_size.x=1"}),
                      Equals("train.batch_size.x: unknown key (train.batch_size is a value, not a section)"));
  REQUIRE_THROWS_WITH(parse("", {"train.epochs"}), Equals("--set train.epochs: expected key=value"));
  REQUIRE_THROWS_WITH(parse("", {"=3"}), Equals("--set =3: expected key=value"));
  REQUIRE_THROWS_WITH(parse("", {"optim.lr=fast"}), Equals("optim.lr: expected a number, got \"fast\""));
  REQUIRE_THROWS_WITH(parse("", {"model.hidden=[1,"}), Contains("model.hidden: cannot read \"[1,\" as a YAML value"));
  REQUIRE_THROWS_WITH(parse("", {"dist.backend=mpi"}), Contains("dist.backend: must be one of"));
}

TEST_CASE("an override can fix a bad value from the file", "[config]") {
  REQUIRE_THROWS_WITH(parse("optim: {lr: -1}"), Contains("optim.lr: must be in (0, 1e+06]"));
  CHECK(parse("optim: {lr: -1}", {"optim.lr=0.1"}).optim.lr == 0.1);
}

TEST_CASE("to_yaml writes every key and reads back the same", "[config]") {
  TrainConfig config = parse(
      "run: {name: \"yes\", output_dir: \"\"}\n"
      "data: {path: \"/data/with space: and #hash\", mean: 0.1, std: 0.30000000000000004}\n"
      "model: {hidden: []}\n"
      "optim: {lr: 1e-8, name: adam}\n"
      "checkpoint: {resume: \"123\"}\n");
  std::string yaml = ddp::to_yaml(config);
  TrainConfig again = parse(yaml);
  CHECK(ddp::to_yaml(again) == yaml);
  CHECK(again.run.name == "yes");
  CHECK(again.data.path == "/data/with space: and #hash");
  CHECK(again.data.std == 0.30000000000000004);
  CHECK(again.optim.lr == 1e-8);
  CHECK(again.model.mlp.hidden.empty());
  CHECK(again.checkpoint.resume == (std::filesystem::current_path() / "123").string());  // a path, made absolute

  YAML::Node root = YAML::Load(yaml);
  CHECK(root.size() == 12);  // run dist data sampler model optim schedule train eval checkpoint logging monitor
  CHECK(root["train"]["batch_size"].as<int64_t>() == 64);
  CHECK(root["model"]["hidden"].IsSequence());
  CHECK(yaml.rfind("run:\n  name: \"yes\"\n  output_dir: \"\"\n  seed: 0\ndist:\n", 0) == 0);
}

TEST_CASE("config files: missing, malformed, fine", "[config]") {
  ddp::test::TempDir dir;
  REQUIRE_THROWS_WITH(ddp::load_train_config(dir.file("absent.yaml"), {}),
                      Equals("config file not found: " + dir.file("absent.yaml")));

  std::string bad = dir.file("bad.yaml");
  ddp::test::write_file(bad, "train:\n  epochs: 2\n  batch_size: [1, 2\n");
  REQUIRE_THROWS_AS(ddp::load_train_config(bad, {}), ConfigError);
  REQUIRE_THROWS_WITH(ddp::load_train_config(bad, {}), Contains(bad + ":4:") && Contains("invalid YAML"));

  std::string tabbed = dir.file("tabbed.yaml");
  ddp::test::write_file(tabbed, "train:\n  epochs: 2\n\tbatch_size: 8\n");
  REQUIRE_THROWS_WITH(ddp::load_train_config(tabbed, {}),
                      Contains("invalid YAML") &&
                          Contains("(line 3 is indented with a tab, which YAML does not allow: indent with spaces)"));

  // A quoted string that never ends: yaml-cpp ends it at the end of the file, and the later keys were
  // its text (was: loaded, train.epochs at its default). Closed ones, with escaped quotes, load.
  std::string open_quote = dir.file("open_quote.yaml");
  ddp::test::write_file(open_quote, "run:\n  name: \"abc\ntrain:\n  epochs: 2\n");
  REQUIRE_THROWS_WITH(ddp::load_train_config(open_quote, {}),
                      Equals(open_quote + ":2:9: invalid YAML: the string quoted with \" here never ends (its closing \" "
                                          "is missing), so the rest of the file would be read as its text"));
  ddp::test::write_file(open_quote, "optim:\n  name: 'it''s\n  lr: 0.5\n");
  REQUIRE_THROWS_WITH(ddp::load_train_config(open_quote, {}), Contains(":2:9: invalid YAML: the string quoted with '"));
  // After a byte-order mark, which yaml-cpp does not count in its positions.
  ddp::test::write_file(open_quote, "\xEF\xBB\xBF" "optim:\n  name: 'it''s\n  lr: 0.5\n");
  REQUIRE_THROWS_WITH(ddp::load_train_config(open_quote, {}), Contains(":2:9: invalid YAML: the string quoted with '"));
  ddp::test::write_file(open_quote, "\xEF\xBB\xBFrun: {name: \"a\\\"b\", output_dir: 'x''y'}\ntrain:\n  epochs: 2\n");
  auto closed = ddp::load_train_config(open_quote, {});
  CHECK(closed.run.name == "a\"b");
  CHECK(closed.train.epochs == 2);

  // Two documents: the second's keys would be dropped unread, a typo or a new value alike.
  std::string two = dir.file("two.yaml");
  ddp::test::write_file(two, "train:\n  epochs: 2\n---\ntrain: {epochs: 5, bogus_key: 1}\n");
  REQUIRE_THROWS_WITH(ddp::load_train_config(two, {}),
                      Equals(two + ":4: a second YAML document, of 2 in the file (after a `---` or `...` line): a "
                                   "config is one document; merge them, or keep each in a file of its own"));
  ddp::test::write_file(two, "---\ntrain:\n  epochs: 2\n...\n");  // one document, marked as such
  CHECK(ddp::load_train_config(two, {}).train.epochs == 2);

  // A key or value the schema refuses: the file's line and column of its key, the innermost one;
  // each of several on a line of its own, the --set ones' and the range problems' too.
  std::string wrong = dir.file("wrong.yaml");
  ddp::test::write_file(wrong, "train:\n  epochs: 2\n  batch_size: many\nmodel: {hiden: [8]}\n");
  REQUIRE_THROWS_WITH(ddp::load_train_config(wrong, {"optim.lr=fast", "optim.lr_sceduling=none", "train.epochs=0"}),
                      Equals(wrong + ":3:3: train.batch_size: expected an integer, got \"many\"\n" + wrong +
                             ":4:9: model.hiden: unknown key (did you mean model.hidden?)\n"
                             "optim.lr: expected a number, got \"fast\"\n"
                             "optim.lr_sceduling: unknown key (did you mean optim.lr_scaling?)\n"
                             "train.epochs: must be in [1, 1e+06], got 0"));
  ddp::test::write_file(wrong, "train:\n  epochs: 2\n  batch_size: many\n");
  REQUIRE_THROWS_WITH(ddp::load_train_config(wrong, {}),
                      Equals(wrong + ":3:3: train.batch_size: expected an integer, got \"many\""));
  // A section given twice is one more of them, not the one that hides the rest.
  ddp::test::write_file(wrong, "train: {batch_size: many}\nmodel: {hiden: [8]}\ntrain: {epochs: 2}\n");
  REQUIRE_THROWS_WITH(ddp::load_train_config(wrong, {"optim.lr=fast"}),
                      Contains(wrong + ":3:1: train: duplicate key") && Contains("train.batch_size: expected an integer") &&
                          Contains("model.hiden: unknown key") && Contains("optim.lr: expected a number"));
  // So is a scalar key given a list or a map.
  ddp::test::write_file(wrong, "train: {epochs: [2, 3], batch_size: {a: 1}}\nmodel: {hiden: [8]}\n");
  REQUIRE_THROWS_WITH(ddp::load_train_config(wrong, {}),
                      Equals(wrong + ":1:9: train.epochs: expected an integer, got a list\n" + wrong +
                             ":1:25: train.batch_size: expected an integer, got a map\n" + wrong +
                             ":2:9: model.hiden: unknown key (did you mean model.hidden?)"));
  // A key that could not be read is not judged at its default by the rules across keys.
  ddp::test::write_file(wrong, "train:\n  epochs: 2\n");
  REQUIRE_THROWS_WITH(ddp::load_train_config(wrong, {"data.dataset=[graph]", "eval.full_neighbourhood=true"}),
                      Contains("data.dataset: expected") && !Contains("for graphs"));
  ddp::test::write_file(wrong, "model:\n  name: mlp\n  hiden: [8]\n");
  REQUIRE_THROWS_WITH(ddp::load_train_config(wrong, {}), StartsWith(wrong + ":3:3: model.hiden: unknown key"));
  ddp::test::write_file(wrong, "train: {epochs: 2, epochs: 3}\n");
  REQUIRE_THROWS_WITH(ddp::load_train_config(wrong, {}), StartsWith(wrong + ":1:20: train.epochs: duplicate key"));
  // A --set value is not the file's: no location.
  ddp::test::write_file(wrong, "train:\n  epochs: 2\n");
  REQUIRE_THROWS_WITH(ddp::load_train_config(wrong, {"train.epochs=x"}),
                      Equals("train.epochs: expected an integer, got \"x\""));

  std::string good = dir.file("good.yaml");
  ddp::test::write_file(good, "train:\n  epochs: 2\n");
  TrainConfig config = ddp::load_train_config(good, {"train.batch_size=16"});
  CHECK(config.train.epochs == 2);
  CHECK(config.train.batch_size == 16);
}

TEST_CASE("docs/config.md holds the generated reference", "[config][docs]") {
  std::string path = std::string(DDP_SOURCE_DIR) + "/docs/config.md";
  std::string doc = ddp::test::read_file(path);
  std::string reference = ddp::config_reference_markdown();
  std::size_t marker = doc.find(kDocsMarker);
  REQUIRE(marker != std::string::npos);
  std::string expected = doc.substr(0, marker) + kDocsMarker + "\n\n" + reference;
  const char* update = std::getenv("DDP_UPDATE_DOCS");
  if (update && std::string(update) == "1" && doc != expected) {
    ddp::test::write_file(path, expected);
    doc = expected;
  }
  if (doc != expected) {
    // Point at the first stale line rather than dumping both documents.
    std::size_t at = 0;
    while (at < doc.size() && at < expected.size() && doc[at] == expected[at]) ++at;
    std::size_t line = 1 + std::count(expected.begin(), expected.begin() + at, '\n');
    std::size_t begin = expected.rfind('\n', at == 0 ? 0 : at - 1);
    begin = begin == std::string::npos ? 0 : begin + 1;
    FAIL("docs/config.md is out of date from line " << line << ", which should read:\n"
         << expected.substr(begin, expected.find('\n', begin) - begin)
         << "\nregenerate it with DDP_UPDATE_DOCS=1 build/bin/test_loop \"[docs]\"");
  }
  CHECK(doc.find(reference) != std::string::npos);
}

TEST_CASE("every config key is in ddp-train(1) and the bash completion, generated from the schema", "[config][docs]") {
  // Both files are written at build time from config_reference(): a key declared anywhere appears in
  // both with no edit to either, and this sweep fails for one that does not.
  std::string share = std::string(DDP_BIN_DIR) + "/../share/";
  std::string man = ddp::test::read_file(share + "man/man1/ddp-train.1");
  std::string completion = ddp::test::read_file(share + "bash-completion/completions/ddprun");
  CHECK_THAT(man, Contains(".TH DDP-TRAIN 1") && Contains(".SH CONFIG KEYS"));
  std::size_t keys = 0;
  for (const auto& section : ddp::config_reference()) {
    CHECK_THAT(man, Contains(".SS " + section.name + "\n"));
    for (const auto& key : section.keys) {
      ++keys;
      std::string roff_path;
      for (char c : key.path) roff_path += c == '-' ? std::string("\\-") : std::string(1, c);
      CHECK_THAT(man, Contains("\\fB" + roff_path + "\\fR"));
      CHECK_THAT(completion, Contains(" " + key.path + " ") || Contains("(" + key.path + " ") || Contains(" " + key.path + ")"));
      if (!key.choices.empty()) CHECK_THAT(completion, Contains("'" + key.path + "="));
    }
  }
  CHECK(keys > 80);  // the sweep found the schema, not an empty list
}

TEST_CASE("a pipeline's default microbatches keep the stages busy and are never larger than train.batch_size",
          "[config][pipeline]") {
  using ddp::share_pipeline_batch;
  CHECK(share_pipeline_batch(16, 1, 2, 0, 8).grad_accum_steps == 4);  // 2P
  CHECK(share_pipeline_batch(6, 1, 2, 0, 8).grad_accum_steps == 2);   // P, where 2P does not divide 6
  // train.grad_accum_steps 4 at batch 8 over 2 stages: 64 samples, 2P = 4 would cut microbatches of 16.
  CHECK(share_pipeline_batch(64, 1, 2, 0, 8).grad_accum_steps == 8);
  CHECK(share_pipeline_batch(64, 1, 2, 0, 8).batch_size == 8);
  CHECK(share_pipeline_batch(60, 1, 2, 0, 8).grad_accum_steps == 10);  // the first count past 2P that divides 60
  // Neither 2P nor P divides the share: the fewest from P on that do (were refused, naming
  // dist.microbatches, which was not set); a share smaller than P, one sample each.
  CHECK(share_pipeline_batch(40, 1, 3, 0, 7).grad_accum_steps == 8);
  CHECK(share_pipeline_batch(8, 1, 3, 0, 8).grad_accum_steps == 4);
  CHECK(share_pipeline_batch(2, 1, 3, 0, 8).grad_accum_steps == 2);
  CHECK(share_pipeline_batch(64, 1, 2, 2, 8).batch_size == 32);        // dist.microbatches given: as given, and said
  CHECK_THAT(share_pipeline_batch(64, 1, 2, 2, 8).formation,
             Catch::Contains("2 microbatches of 32 (above train.batch_size 8, as dist.microbatches 2 asks) a step"));
  CHECK_THAT(share_pipeline_batch(64, 1, 2, 0, 8).formation, !Catch::Contains("above"));
  CHECK_THROWS_WITH(share_pipeline_batch(64, 1, 2, 3, 8), Catch::Contains("use a dist.microbatches that divides"));
}

TEST_CASE("train.global_batch_size chooses the micro-steps, and refuses a second say in them", "[config][elastic]") {
  using ddp::share_global_batch;
  CHECK(share_global_batch(12, 1, 4).batch_size == 4);
  CHECK(share_global_batch(12, 1, 4).grad_accum_steps == 3);
  CHECK(share_global_batch(12, 2, 4).batch_size == 3);  // 6 a rank: 2 × 3, not 1 × 6 over the cap
  CHECK(share_global_batch(12, 2, 4).grad_accum_steps == 2);
  CHECK(share_global_batch(14, 2, 4).batch_size == 1);  // 7 is prime: 7 micro-steps of 1
  CHECK(share_global_batch(14, 2, 4).grad_accum_steps == 7);
  CHECK(share_global_batch(64, 4, 64).grad_accum_steps == 1);
  CHECK_THROWS_WITH(share_global_batch(12, 5, 4), Catch::Contains("do not split evenly over 5 ranks"));
  // Under dist.tensor the world sizes that fit are whole groups: 2 × (1, 3), not 1 or 3.
  CHECK_THROWS_WITH(share_global_batch(3, 2, 4, 2),
                    Catch::Contains("3 samples do not split evenly over 2 tensor groups of 2 ranks (dist.tensor); this "
                                    "run needs a world size that is 2 × a number that divides it (2, 6)"));
  auto error_of = [](const std::string& yaml) {
    try {
      parse_train_config(yaml, {});
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK_THAT(error_of("train: {global_batch_size: 12, grad_accum_steps: 2}"),
             Catch::Contains("train.grad_accum_steps: is chosen from train.global_batch_size"));
  CHECK_THAT(error_of("train: {global_batch_size: 12}\noptim: {lr_scaling: linear}"),
             Catch::Contains("optim.lr_scaling: must be none with train.global_batch_size"));
  CHECK(error_of("train: {global_batch_size: 12}").empty());
}

TEST_CASE("model.embedding_rows takes one size for every table or 26, and data.dataset criteo keeps its features",
          "[config]") {
  const std::string criteo = "data: {dataset: criteo, path: log.tsv, eval_split: none}\n";
  CHECK_THROWS_WITH(parse(criteo + "model: {name: dlrm, embedding_rows: [10, 20, 30]}"),
                    Contains("model.embedding_rows: expected one value for every table or 26 (one per categorical "
                             "feature), got 3"));
  CHECK_NOTHROW(parse(criteo + "model: {name: dlrm, embedding_rows: [100]}"));
  CHECK_NOTHROW(parse("model: {name: mlp, embedding_rows: [10, 20, 30]}"));  // another family's key: not its rule
  CHECK_THROWS_WITH(parse("data: {dataset: criteo, path: log.tsv, eval_split: none, normalize: global}"),
                    Contains("data.normalize: criteo: the counts are log-scaled and the hashes must stay whole"));
}

TEST_CASE("model.embedding_sharding: sharded tables refuse a dense update, pipelines and clipping, each naming the "
          "key, and take any dist.shard",
          "[config][tables]") {
  const std::string dlrm = "data: {dataset: criteo, path: log.tsv, eval_split: none}\nmodel: {name: dlrm}\n";
  CHECK_NOTHROW(parse(dlrm, {"model.embedding_sharding=row"}));
  CHECK_NOTHROW(parse(dlrm, {"model.embedding_sharding=table", "optim.embeddings=sgd"}));
  CHECK_THROWS_WITH(parse(dlrm, {"model.embedding_sharding=rows"}),
                    Contains("model.embedding_sharding") && Contains("replicate, table, row"));
  CHECK_THROWS_WITH(parse(dlrm, {"model.embedding_sharding=row", "optim.embeddings=dense"}),
                    Contains("model.embedding_sharding: sharded tables are updated only where a batch touched them"));
  for (std::string shard : {"optimizer", "gradients", "parameters"})
    CHECK_NOTHROW(parse(dlrm, {"model.embedding_sharding=table", "dist.shard=" + shard}));
  CHECK_THROWS_WITH(parse(dlrm, {"model.embedding_sharding=row", "dist.pipeline=2"}),
                    Contains("model.embedding_sharding: runs with dist.pipeline 1 for now, not 2"));
  CHECK_THROWS_WITH(parse(dlrm, {"model.embedding_sharding=row", "train.clip_grad_norm=1"}),
                    Contains("optim.embeddings: updates the tables' rows apart from the dense optimizer"));
  CHECK_THROWS_WITH(parse(dlrm, {"optim.embeddings=rowwise_adagrad", "dist.shard=optimizer"}),
                    Contains("optim.embeddings: updates replicated tables from their whole gradients, which "
                             "dist.shard optimizer splits"));
  CHECK_NOTHROW(parse(dlrm, {"train.clip_grad_norm=1"}));  // replicated tables under the dense optimizer
  CHECK_THROWS_WITH(parse(dlrm, {"model.embedding_sharding=row", "model.activation_checkpointing=full"}),
                    Contains("model.embedding_sharding: runs with model.activation_checkpointing none for now"));
  CHECK_THROWS_WITH(parse(dlrm, {"model.embedding_sharding=row", "model.init_from=model.pt"}),
                    Contains("model.embedding_sharding: makes each rank's rows from the seed, and cannot start from "
                             "model.init_from yet"));
  CHECK_THROWS_WITH(parse(dlrm, {"model.embedding_sharding=table", "checkpoint.format=whole"}),
                    Contains("model.embedding_sharding: keeps each rank's rows on that rank, which "
                             "checkpoint.format whole would pass through every rank"));
  CHECK_THROWS_WITH(parse(dlrm, {"optim.embeddings=sgd", "dist.pipeline=2"}),
                    Contains("optim.embeddings: updates replicated tables row by row with dist.pipeline 1 for now"));
}

TEST_CASE("model.init_from's config.json against the YAML: the same model said otherwise is no conflict",
          "[config][hugging_face]") {
  ddp::test::TempDir dir;
  ddp::test::write_file(dir.file("config.json"), R"({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
                                                     "num_key_value_heads": 4, "num_hidden_layers": 2,
                                                     "intermediate_size": 192, "vocab_size": 300})");
  const std::string yaml = "model: {name: llama, init_from: " + dir.path() + "}\ntrain: {task: causal_lm}\n" +
                           "data: {dataset: tokens, path: x.bin, eval_split: none}\n";
  // n_kv_heads 0 is "as many as n_head", ffn_dim 0 the Llama's rule (int(2 · 4 · 64 / 3) = 170, up
  // to a multiple of model.multiple_of): a run's own config.yaml says 0 where its config.json says
  // the value.
  CHECK_NOTHROW(parse(yaml, {"model.n_kv_heads=0"}));
  CHECK_NOTHROW(parse(yaml, {"model.ffn_dim=0", "model.multiple_of=32"}));  // 192
  CHECK_THROWS_WITH(parse(yaml, {"model.ffn_dim=0", "model.multiple_of=256"}),  // 256
                    Contains("model.ffn_dim: 0 here, but " + dir.path() + "/config.json (model.init_from) makes it 192"));
  CHECK_THROWS_WITH(parse(yaml, {"model.n_kv_heads=2"}),
                    Contains("model.n_kv_heads: 2 here, but " + dir.path() + "/config.json (model.init_from) makes it 4"));
}

}  // namespace DDP_TEST_FILE
