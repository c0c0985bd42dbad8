#include "ddp/loop/train_config.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "ddp/common/atomic_file.h"
#include "ddp/common/error.h"
#include "ddp/common/version.h"
#include "ddp/config/config_schema.h"
#include "ddp/loop/prior_run.h"
#include "ddp/model/hugging_face.h"
#include "ddp/model/llama_config.h"
#include "ddp/parallel/tensor_plan.h"

namespace ddp {
namespace {

// Section order here is the order of to_yaml() and of the docs.
void declare_all(ConfigSchema& schema, TrainConfig& config) {
  declare_config(schema, config.run);
  declare_config(schema, config.dist);
  declare_config(schema, config.mesh);
  declare_config(schema, config.data);
  declare_config(schema, config.sampler);
  declare_config(schema, config.model, task_built_models());
  declare_config(schema, config.optim);
  declare_config(schema, config.schedule);
  declare_config(schema, config.train);
  declare_config(schema, config.task);
  declare_config(schema, config.loss);
  declare_config(schema, config.eval);
  declare_config(schema, config.checkpoint);
  declare_config(schema, config.logging);
  declare_config(schema, config.monitor);
  // Across sections: data.dataset, model.name and train.loss must be what train.task trains with.
  declare_task_rules(schema, config.task, config.data, config.model, config.loss);
  // The global batch does not grow with the world size, so neither may the learning rate.
  schema.rule("optim.lr_scaling", [&config]() -> std::string {
    return config.train.global_batch_size > 0 && config.optim.lr_scaling != "none"
               ? "must be none with train.global_batch_size: the global batch is the same at every world size, "
                 "so optim.lr is its rate as given"
               : "";
  });
  // A cosine decays from the lr to min_lr: above it, it would climb instead, and silently (a run at
  // lr 4.8 that diverged, exit 0). optim.lr_scaling raises the lr it starts from, at any world size by 1 or more.
  schema.rule("schedule.min_lr", [&config]() -> std::string {
    if (config.schedule.name != "cosine" || config.schedule.min_lr <= config.optim.lr ||
        config.optim.lr_scaling != "none")
      return "";
    return fmt::format("{} is above optim.lr {}, the lr the cosine decays from: it would take the lr up instead",
                       config.schedule.min_lr, config.optim.lr);
  });
  // Note [Sharded tables]: what the table passes compose with so far.
  schema.rule("model.embedding_sharding", [&config]() -> std::string {
    if (config.model.embedding_sharding == "replicate") return "";
    if (config.optim.embeddings == "dense")
      return "sharded tables are updated only where a batch touched them: optim.embeddings must be sgd, "
             "rowwise_adagrad or auto, not dense";
    if (config.mesh.pipeline > 1) return "runs with dist.pipeline 1 for now, not " + std::to_string(config.mesh.pipeline);
    if (!config.model.init_from.empty())
      return "makes each rank's rows from the seed, and cannot start from model.init_from yet: resume a "
             "checkpoint of the run instead";
    if (config.checkpoint.format == "whole")
      return "keeps each rank's rows on that rank, which checkpoint.format whole would pass through every "
             "rank to write one file: use auto or sharded (a file per rank, which any layout resumes)";
    // A recomputed block's gradients reach only its parameters, and the rows' lookup is not one.
    if (config.model.activation_checkpointing != "none")
      return "runs with model.activation_checkpointing none for now (the features block that looks the rows up "
             "would be recomputed without sending their gradients), not " + config.model.activation_checkpointing;
    return "";
  });
  schema.rule("optim.embeddings", [&config]() -> std::string {
    const bool rows = config.optim.embeddings == "sgd" || config.optim.embeddings == "rowwise_adagrad";
    if (rows && config.model.embedding_sharding == "replicate" && config.mesh.shard != "none")
      return "updates replicated tables from their whole gradients, which dist.shard " + config.mesh.shard +
             " splits: use dist.shard none, or optim.embeddings dense";
    if (rows && config.model.embedding_sharding == "replicate" && config.mesh.pipeline > 1)
      return "updates replicated tables row by row with dist.pipeline 1 for now, not " +
             std::to_string(config.mesh.pipeline) + ": use optim.embeddings dense";
    if ((rows || (config.optim.embeddings == "auto" && config.model.embedding_sharding != "replicate")) &&
        config.train.clip_grad_norm > 0)
      return "updates the tables' rows apart from the dense optimizer (as TorchRec's fused optimizers), outside "
             "train.clip_grad_norm's global norm: set train.clip_grad_norm 0, or optim.embeddings dense with "
             "model.embedding_sharding replicate";
    return "";
  });
  schema.rule("train.chunked_loss", [&config]() -> std::string {
    if (config.loss.chunked != "on") return "";
    if (config.task.task != "causal_lm") return "is for train.task causal_lm, not " + config.task.task;
    if (config.mesh.shard == "parameters")
      return "on does not combine with dist.shard parameters yet, which frees lm_head's weights between its "
             "forward and the loss's backward: use auto or off";
    if (!head_stays_whole(config))
      return "on does not combine with dist.tensor's loss-parallel cross-entropy, which already leaves each rank "
             "a slice of the vocabulary's logits: use auto or off";
    return "";
  });
  schema.rule("dist.sequence_parallel", [&config]() -> std::string {
    if (!config.mesh.sequence_parallel) return "";
    if (config.mesh.tensor == 1) return "splits the sequence over a tensor group: set dist.tensor above 1";
    if (config.model.block_size % config.mesh.tensor != 0)
      return "model.block_size " + std::to_string(config.model.block_size) + " must divide by dist.tensor " +
             std::to_string(config.mesh.tensor) + " (each rank keeps an equal part of the sequence)";
    if (config.mesh.pipeline > 1) return "runs with dist.pipeline 1 for now, not " + std::to_string(config.mesh.pipeline);
    if (!config.mesh.tensor_plan.empty())
      return "runs with a model's built-in plan (model.name gpt or llama) for now, not with dist.tensor_plan";
    return "";
  });
  // Stages run a replica's share as microbatches: the statistics are one microbatch's over the
  // replicas, as with train.grad_accum_steps (docs/parallelism.md), not the global batch's.
  schema.notice("model.sync_batchnorm", [&config]() -> std::string {
    return config.model.name == "convnet" && config.model.convnet.sync_batchnorm && config.model.convnet.batchnorm &&
                   config.mesh.pipeline > 1
               ? "with dist.pipeline " + std::to_string(config.mesh.pipeline) +
                     ", the BatchNorm statistics are each microbatch's over the replicas, not the step's global "
                     "batch's (as with train.grad_accum_steps)"
               : "";
  });
  // The loop owns eval:, but only a graph has neighbours to evaluate over.
  schema.rule("eval.full_neighbourhood", [&config]() -> std::string {
    return config.eval.full_neighbourhood && config.data.dataset != "graph"
               ? "evaluating over every neighbour is for graphs (data.dataset: graph)"
               : "";
  });
}

// YAML forbids tabs in indentation, and yaml-cpp's message for one ("illegal map value") says
// nothing of tabs: name the first line up to the error's that is indented with one (blank lines aside).
std::string tab_hint(const std::string& text, std::size_t error_line) {
  std::size_t line = 1;
  for (std::size_t at = 0; at < text.size() && line <= error_line; ++line) {
    std::size_t end = std::min(text.find('\n', at), text.size());
    std::size_t indent = text.find_first_not_of(" \t", at);
    if (indent != std::string::npos && indent < end && text.substr(at, indent - at).find('\t') != std::string::npos)
      return " (line " + std::to_string(line) + " is indented with a tab, which YAML does not allow: indent with spaces)";
    at = end + 1;
  }
  return "";
}

// yaml-cpp takes a quoted string that never ends as ending at the end of the file: `name: "abc`
// then swallowed every later key, silently. A quoted scalar's mark is its opening quote; the closing
// one must come before the end. ConfigError naming the line, else nothing.
// `depth`: an alias of its own parent (`a: &x [*x]`) makes the tree a cycle; no config nests so deep.
void check_quotes_close(const YAML::Node& node, const std::string& text, const std::string& source, int depth = 0) {
  if (depth > 64) return;
  if (node.IsMap()) {
    for (const auto& pair : node) {
      check_quotes_close(pair.first, text, source, depth + 1);
      check_quotes_close(pair.second, text, source, depth + 1);
    }
    return;
  }
  if (node.IsSequence()) {
    for (const auto& item : node) check_quotes_close(item, text, source, depth + 1);
    return;
  }
  if (!node.IsScalar() || node.Tag() != "!") return;  // "!": a quoted scalar
  // yaml-cpp counts positions after a UTF-8 byte-order mark, which `text` still holds.
  const std::size_t bom = text.rfind("\xEF\xBB\xBF", 0) == 0 ? 3 : 0;
  const auto at = static_cast<std::size_t>(std::max(0, node.Mark().pos)) + bom;
  if (at >= text.size() || (text[at] != '"' && text[at] != '\'')) return;
  const char quote = text[at];
  for (std::size_t i = at + 1; i < text.size(); ++i) {
    if (quote == '"' && text[i] == '\\') {
      ++i;  // an escape: the next character is its
    } else if (text[i] == quote) {
      if (quote == '\'' && i + 1 < text.size() && text[i + 1] == '\'') {
        ++i;  // '' is a quote inside a single-quoted string
      } else {
        return;
      }
    }
  }
  throw ConfigError(source + ":" + std::to_string(node.Mark().line + 1) + ":" + std::to_string(node.Mark().column + 1) +
                    ": invalid YAML: the string quoted with " + quote + " here never ends (its closing " + quote +
                    " is missing), so the rest of the file would be read as its text");
}

YAML::Node parse_yaml(const std::string& text, const std::string& source) {
  try {
    // Every document is parsed: a second one (after `---`) would otherwise be dropped unread, its
    // keys and values, wrong or not, never applied.
    std::vector<YAML::Node> documents = YAML::LoadAll(text);
    if (documents.size() > 1)
      throw ConfigError(source + ":" + std::to_string(documents[1].Mark().line + 1) + ": a second YAML document, of " +
                        std::to_string(documents.size()) +
                        " in the file (after a `---` or `...` line): a config is one document; merge them, or keep "
                        "each in a file of its own");
    if (documents.empty()) return YAML::Node();
    check_quotes_close(documents.front(), text, source);
    return documents.front();
  } catch (const YAML::ParserException& e) {
    // yaml-cpp counts lines and columns from 0; editors count from 1.
    throw ConfigError(source + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1) +
                      ": invalid YAML: " + e.msg + tab_hint(text, e.mark.line + 1));
  } catch (const YAML::Exception& e) {
    throw ConfigError(source + ": invalid YAML: " + e.msg);
  }
}

// Keys a run directory's config.yaml recorded, beneath the file (Note [model.init_from gone]).
struct RecordedLayer {
  YAML::Node root;
  std::string source;
};

// The file, then the overrides, on top of `under` (assignments as --set takes them) and `recorded`
// over the defaults.
void layer(ConfigSchema& schema, const std::vector<std::string>& under, const YAML::Node& root,
           const std::string& source, const std::filesystem::path& file_dir, const std::vector<std::string>& overrides,
           const RecordedLayer& recorded) {
  if (recorded.root.IsMap()) schema.load(recorded.root, recorded.source);
  for (const auto& assignment : under) schema.apply_override(assignment);
  schema.collect_errors();  // the file's and the overrides' errors, all said by validate()
  schema.load(root, source);
  schema.resolve_paths(file_dir);  // Note [Relative paths]
  for (const auto& assignment : overrides) schema.apply_override(assignment);
  schema.resolve_paths(std::filesystem::current_path());
}

// One key's value as to_yaml() writes it.
std::string value_of(const YAML::Node& values, const std::string& path) {
  auto dot = path.find('.');
  return YAML::Dump(values[path.substr(0, dot)][path.substr(dot + 1)]);
}

TrainConfig build(const YAML::Node& root, const std::string& source, const std::filesystem::path& file_dir,
                  const std::vector<std::string>& overrides, const RecordedLayer& recorded = {}, bool validate = true) {
  TrainConfig config;
  ConfigSchema schema;
  declare_all(schema, config);
  layer(schema, {}, root, source, file_dir, overrides, recorded);
  // Note [Hugging Face directories]: model.init_from's config.json, under the file and the overrides.
  const std::string directory = config.model.init_from;
  if (!directory.empty()) schema.throw_collected();  // before what the import could throw instead
  HuggingFaceKeys imported;
  try {
    imported = hugging_face_model_keys(directory);
  } catch (const FileError& e) {
    throw ConfigError(std::string("model.init_from: ") + e.what());
  }
  if (!imported.assignments.empty()) {
    TrainConfig alone, merged;
    ConfigSchema alone_schema, merged_schema;
    declare_all(alone_schema, alone);
    declare_all(merged_schema, merged);
    for (const auto& assignment : imported.assignments) alone_schema.apply_override(assignment);
    layer(merged_schema, imported.assignments, root, source, file_dir, overrides, recorded);
    // A key the file or an override set to another value than config.json's: which one is meant?
    const YAML::Node ours = YAML::Load(merged_schema.to_yaml()), theirs = YAML::Load(alone_schema.to_yaml());
    // Values that say the same model differently: the Llama's n_kv_heads 0 is "as many as n_head",
    // its ffn_dim 0 the width its rule gives.
    auto meant = [](const YAML::Node& node, const TrainConfig& config, const std::string& key) {
      const LlamaConfig& llama = config.model.llama;
      if (key == "model.n_kv_heads") return std::to_string(llama.n_kv_heads > 0 ? llama.n_kv_heads : llama.n_head);
      if (key == "model.ffn_dim") return std::to_string(llama_ffn_dim(llama));
      return value_of(node, key);
    };
    auto among = [](const std::vector<std::string>& keys, const std::string& key) {
      return std::find(keys.begin(), keys.end(), key) != keys.end();
    };
    std::string conflicts;
    for (const auto& assignment : imported.assignments) {
      const std::string key = assignment.substr(0, assignment.find('='));
      const std::string here = meant(ours, merged, key), there = meant(theirs, alone, key);
      if (here == there || among(imported.free, key)) continue;
      const bool lower = among(imported.at_most, key);
      if (lower && std::stod(here) <= std::stod(there)) continue;
      conflicts += (conflicts.empty() ? "" : "\n") + key + ": " + value_of(ours, key) + " here, but " + directory +
                   "/config.json (model.init_from) makes it " + (lower ? "at most " : "") + value_of(theirs, key) +
                   (lower ? "; set it lower, or leave it out" : "; leave it out") +
                   ", or train another architecture without model.init_from";
    }
    if (!conflicts.empty()) throw ConfigError(conflicts);
    if (validate) merged_schema.validate();
    return merged;
  }
  // Only now, so that an override can fix a bad value from the file.
  if (validate) schema.validate();
  return config;
}

}  // namespace

namespace {

std::string read_config_file(const std::string& path) {
  std::error_code error;
  if (!std::filesystem::exists(path, error)) throw ConfigError("config file not found: " + path);
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in || std::filesystem::is_directory(path, error)) throw ConfigError("cannot read config file: " + path);
  return text.str();
}

// The section.key names of a config's text, in its order; empty for text that is not YAML.
std::vector<std::string> keys_in_order(const std::string& text) {
  std::vector<std::string> keys;
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception&) {
    return keys;
  }
  if (!root.IsMap()) return keys;
  for (const auto& section : root) {
    if (!section.first.IsScalar() || !section.second.IsMap()) continue;
    for (const auto& key : section.second)
      if (key.first.IsScalar()) keys.push_back(section.first.as<std::string>() + "." + key.first.as<std::string>());
  }
  return keys;
}

// A run's config.yaml (beside its metrics.jsonl), written whole by this ddprun (its first line says so), that holds
// only the first of the keys a run writes: cut short (a copy that stopped, a full disk). Said as that, not as whatever
// the cut left wrong, nor loaded with the missing keys' defaults (a cut between sections leaves valid YAML).
void check_not_cut_short(const std::string& text, const std::string& path) {
  const std::string version = version_line(), ours = "# " + version.substr(0, version.find(',')) + ",";
  // A copy trimmed by hand to make another run's config is no record.
  std::error_code error;
  const std::filesystem::path file(path);
  if (file.filename() != "config.yaml" || !std::filesystem::exists(file.parent_path() / "metrics.jsonl", error) ||
      text.rfind(ours, 0) != 0)
    return;
  static const std::vector<std::string> every = keys_in_order(to_yaml(TrainConfig{}));
  const std::vector<std::string> present = keys_in_order(text);
  const std::size_t n = present.size();
  // Only a cut leaves exactly a beginning of the keys (the last one's name maybe cut too): another
  // version's file differs elsewhere. (A cut inside a value may leave no YAML at all: no keys.)
  bool beginning = n <= every.size();
  for (std::size_t i = 0; beginning && i + 1 < n; ++i) beginning = present[i] == every[i];
  if (beginning && n > 0)
    beginning = every[n - 1].rfind(present[n - 1], 0) == 0 && (n < every.size() || present[n - 1] != every[n - 1]);
  if (!beginning) return;
  const auto lines = std::count(text.begin(), text.end(), '\n') + (text.back() == '\n' ? 0 : 1);
  throw ConfigError(path + " is cut short: a run writes all " + std::to_string(every.size()) +
                    " keys of its config there, and it ends at line " + std::to_string(lines) +
                    (n == 0 ? std::string(", where no key reads") : ", at " + present.back()) +
                    " (a copy that stopped, a full disk?); restore it from a copy of the run directory");
}

}  // namespace

TrainConfig load_train_config(const std::string& path, const std::vector<std::string>& overrides) {
  const std::string text = read_config_file(path);
  check_not_cut_short(text, path);
  return build(parse_yaml(text, path), path, std::filesystem::absolute(path).parent_path(), overrides);
}

TrainConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides) {
  const std::string text = read_config_file(path);
  check_not_cut_short(text, path);
  const YAML::Node root = parse_yaml(text, path);
  const std::filesystem::path file_dir = std::filesystem::absolute(path).parent_path();
  // Not validated yet: without config.json's keys a model's defaults may not fit the file's.
  const TrainConfig unchecked = build(root, path, file_dir, overrides, {}, /*validate=*/false);
  const std::string& init_from = unchecked.model.init_from;
  std::error_code error;
  if (init_from.empty() || std::filesystem::exists(init_from, error)) return build(root, path, file_dir, overrides);
  // Note [model.init_from gone]: the run directory's record, if it is of a run from this init_from.
  const std::string run_dir = output_dir_of(unchecked.run), recorded_path = run_dir + "/config.yaml";
  YAML::Node recorded;
  if (std::filesystem::is_regular_file(recorded_path, error)) {
    const std::string recorded_text = read_whole_file(recorded_path);
    check_not_cut_short(recorded_text, recorded_path);
    try {
      recorded = parse_yaml(recorded_text, recorded_path);
    } catch (const ConfigError&) {
      recorded = YAML::Node();  // unreadable: init_from is refused as missing
    }
  }
  const YAML::Node model = recorded.IsMap() ? recorded["model"] : YAML::Node();
  const YAML::Node started_from = model.IsMap() ? model["init_from"] : YAML::Node();
  auto same_path = [&error](const std::string& a, const std::string& b) {  // through symlinks too
    return std::filesystem::weakly_canonical(a, error) == std::filesystem::weakly_canonical(b, error);
  };
  if (!started_from || !started_from.IsScalar() || !same_path(started_from.as<std::string>(), init_from))
    throw ConfigError("model.init_from: " + init_from + " does not exist");
  // What the model is, not how it runs: a key that may change on resume takes this run's value.
  YAML::Node keys;
  for (const auto& key : model) {
    const std::string name = key.first.as<std::string>();
    if (name != "init_from" && !may_change_on_resume("model." + name)) keys[name] = key.second;
  }
  YAML::Node layer;
  layer["model"] = keys;
  TrainConfig config = build(root, path, file_dir, overrides, {layer, recorded_path});
  config.model.init_from_gone_run_dir = run_dir;
  return config;
}

TrainConfig parse_train_config(const std::string& yaml_text, const std::vector<std::string>& overrides) {
  return build(parse_yaml(yaml_text, "<config>"), "", std::filesystem::current_path(), overrides);
}

std::string to_yaml(const TrainConfig& config) {
  TrainConfig copy = config;  // the schema binds non-const members
  ConfigSchema schema;
  declare_all(schema, copy);
  return schema.to_yaml();
}

std::string out_of_memory_advice(const TrainConfig& config) {
  std::vector<std::string> ways;
  if (config.mesh.shard == "none")
    ways.push_back(
        "without dist.shard every rank holds the whole model, its gradients and its optimizer state (16 "
        "bytes a parameter with Adam in float32): dist.shard optimizer, gradients or parameters split them "
        "over the ranks (docs/parallelism.md)");
  else if (config.mesh.shard != "parameters")
    ways.push_back("dist.shard " + config.mesh.shard +
                   " leaves every rank the whole parameters: dist.shard "
                   "parameters splits them too (docs/parallelism.md)");
  if (config.model.name == "dlrm")
    ways.push_back(config.model.embedding_sharding == "replicate"
                       ? "model.embedding_sharding table or row splits the embedding tables over the ranks "
                         "(docs/click-through.md)"
                       : "model.embedding_sharding " + config.model.embedding_sharding +
                             " splits the embedding tables already, and this rank's share is too large: fewer "
                             "model.embedding_rows, or more ranks");
  ways.push_back("lower train.batch_size");
  std::string advice;
  for (std::size_t i = 0; i < ways.size(); ++i)
    advice += (i == 0 ? "" : i + 1 == ways.size() ? "; or " : "; ") + ways[i];
  return advice;
}

std::vector<std::string> config_notices(const TrainConfig& config) {
  TrainConfig copy = config;
  ConfigSchema schema;
  declare_all(schema, copy);
  return schema.notices();
}

std::string to_yaml_without_paths(const TrainConfig& config) {
  TrainConfig copy = config;
  ConfigSchema schema;
  declare_all(schema, copy);
  schema.clear_paths();
  return schema.to_yaml();
}

namespace {

// The schema on the defaults, as the references show it. Families that share a key must agree on
// its default (Note [Shared keys]); the references' tests fail here if they do not.
void declare_defaults(ConfigSchema& schema, TrainConfig& defaults) {
  declare_all(schema, defaults);
  std::string disagreements;
  for (const auto& key : schema.shared_disagreements()) disagreements += (disagreements.empty() ? "" : "; ") + key;
  if (!disagreements.empty()) throw std::logic_error("shared config keys with different defaults: " + disagreements);
}

}  // namespace

std::vector<ConfigSchema::SectionReference> config_reference() {
  TrainConfig defaults;
  ConfigSchema schema;
  declare_defaults(schema, defaults);
  return schema.reference();
}

bool head_stays_whole(const TrainConfig& config) {
  bool split = config.mesh.tensor > 1 && config.mesh.tensor_plan.empty();
  if (config.mesh.tensor > 1 && !config.mesh.tensor_plan.empty()) {
    try {
      for (const TensorPlanEntry& entry : parse_tensor_plan(config.mesh.tensor_plan)) split = split || entry.output;
    } catch (const ConfigError&) {  // dist.tensor_plan's own rule names it
    }
  }
  return !split && config.mesh.shard != "parameters";
}

std::string config_reference_markdown() {
  TrainConfig defaults;
  ConfigSchema schema;
  declare_defaults(schema, defaults);
  return schema.markdown();
}

}  // namespace ddp
