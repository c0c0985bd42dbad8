#include "ddp/model/model_config.h"

#include <filesystem>
#include <regex>

#include "ddp/config/config_schema.h"

namespace ddp {

namespace {

void declare_keys(ConfigSchema& schema, ModelConfig& config, const std::vector<std::string>& task_models) {
  schema.section("model", "Which network, by registry name, and its parameters.");
  std::vector<std::string> names = model_names();
  names.insert(names.end(), task_models.begin(), task_models.end());
  schema.add("model.name", &config.name,
             "network from the model registry, or one a task builds itself (graphsage: train.task node_classification)")
      .choices(names);
  schema.add("model.init_from", &config.init_from,
             "start from these weights instead of a fresh initialisation: a state_dict file, as model.pt "
             "or torch.save(model.state_dict(), path) writes it, or a safetensors file of the same names, as "
             "model.safetensors or safetensors.torch.save_file writes it; or a Hugging Face model directory "
             "(config.json and model.safetensors or its shards' index, as save_pretrained, ddp-export and a gpt or llama run's output "
             "directory have them), whose config.json gives the model.* keys the YAML leaves out")
      .file_path();
  schema.add("model.num_classes", &config.num_classes, "built-in models: outputs of the last layer").min(kMinClasses)
      .max(1e7);
  schema.add("model.block_size", &config.block_size,
             "gpt: positions of context; llama: the longest sequence trained on (rotary positions have no "
             "table); train.task causal_lm: tokens per sample's inputs (a sample is a window of "
             "block_size + 1 tokens, its inputs and next-token targets)")
      .min(1)
      .max(1e7);
  schema.add("model.activation_checkpointing", &config.activation_checkpointing,
             "any model made of blocks: none; full, every block keeps only its input through forward and "
             "runs again in backward (less memory for activations, one more forward); every_N, blocks 0, N, "
             "2N, ... of the model (Note [Activation checkpointing])");
  schema.rule("model.activation_checkpointing", [&config]() -> std::string {
    static const std::regex valid("none|full|every_[1-9][0-9]{0,5}");
    return std::regex_match(config.activation_checkpointing, valid)
               ? ""
               : "expected none, full or every_N (N from 1: every Nth block, from the first), got '" +
                     config.activation_checkpointing + "'";
  });
  schema.add("model.embedding_sharding", &config.embedding_sharding,
             "a model with embedding tables (dlrm): replicate, every rank holds every table whole and the "
             "gradients are all-reduced densely; table, each table lives whole on one rank; row, each table's rows "
             "are split evenly over the ranks. table and row look rows up by all-to-all and update only the rows a "
             "batch touched (optim.embeddings; Note [Sharded tables])")
      .choices({"replicate", "table", "row"});
  // Note [Model families]: each family declares its own keys, tagged with its name (Note [Keys a
  // choice reads]): one set for another family is said.
  schema.set_reader("convnet");
  declare_config(schema, config.convnet);
  schema.set_reader("dlrm");
  declare_config(schema, config.dlrm, config.name);
  schema.set_reader("mlp");
  declare_config(schema, config.mlp, config.name);
  schema.set_reader("graphsage");
  declare_config(schema, config.graphsage);
  schema.set_reader("gpt");
  declare_config(schema, config.gpt, config.name);
  schema.set_reader("llama");
  declare_config(schema, config.llama, config.name);
  schema.set_reader("torchscript");
  declare_config(schema, config.torchscript, config.name);
  schema.set_reader("");
}

}  // namespace

bool init_from_hugging_face_directory(const ModelConfig& config) {
  if (config.init_from.empty() || (config.name != "gpt" && config.name != "llama")) return false;
  const std::string extension = std::filesystem::path(config.init_from).extension().string();
  return extension != ".pt" && extension != ".pth" && extension != ".bin" && extension != ".safetensors";
}

void declare_config(ConfigSchema& schema, ModelConfig& config, const std::vector<std::string>& task_models) {
  declare_keys(schema, config, task_models);
  ModelConfig fresh;  // the defaults: `config` may hold loaded values (config_notices declares on them)
  ConfigSchema defaults;
  declare_keys(defaults, fresh, task_models);
  schema.notice_unread(
      "model.name", [&config] { return config.name; }, defaults);
  // A Hugging Face config.json's names, which a model's keys take otherwise.
  const std::pair<const char*, const char*> hugging_face[] = {
      {"hidden_size", "model.dim for a llama, model.n_embd for a gpt"},
      {"num_hidden_layers", "model.n_layer"},
      {"num_attention_heads", "model.n_head"},
      {"num_key_value_heads", "model.n_kv_heads"},
      {"intermediate_size", "model.ffn_dim"},
      {"rms_norm_eps", "model.norm_eps"},
      {"max_position_embeddings", "model.block_size"},
      {"tie_word_embeddings", "model.tie_embeddings"},
      {"n_positions", "model.block_size"}};
  for (const auto& [name, ours] : hugging_face)
    schema.known_as(std::string("model.") + name, std::string("Hugging Face's ") + name + " is " + ours +
                                                      " here; model.init_from reads a config.json's");
}

}  // namespace ddp
