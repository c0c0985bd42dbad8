#pragma once
// `model.*`: which network, and its shape. Each family owns its keys (Note [Model families]); this
// struct collects them, with the two that a task fits its data to.

#include <cstdint>
#include <string>
#include <vector>

#include "ddp/model/convnet_config.h"
#include "ddp/model/dlrm_config.h"
#include "ddp/model/gpt_config.h"
#include "ddp/model/graphsage_config.h"
#include "ddp/model/llama_config.h"
#include "ddp/model/mlp_config.h"
#include "ddp/model/torchscript_config.h"

namespace ddp {

class ConfigSchema;

/// The fewest outputs a classifier may have (the config's bound and the registry's check).
inline constexpr int64_t kMinClasses = 2;

// Note [Model families]: a model family with keys of its own (the registry's convnet, dlrm, gpt, llama, mlp, torchscript,
// and graphsage, which its task builds) owns a config struct in <family>_config.h and declares its
// keys in its own .cpp, next to the code that reads them; ModelConfig only collects them. A key two
// families read (model.hidden: mlp and graphsage) is declared by both (Note [Shared keys] in
// config_schema.h). model.num_classes and model.block_size stay here: they are what a task fits its
// data to (a classifier's outputs, a language model's context), read by the task and by every family
// of its kind; model.init_from, model.activation_checkpointing and model.embedding_sharding too, as
// any family's model takes them (the last, any family with embedding tables). Adding a family is its .cpp and config header, one word in model_registry.cpp's list,
// one member here and one declare_config call in model_config.cpp.

/// The network to train; user-facing keys are model.<key> whichever family reads them.
struct ModelConfig {
  std::string name = "convnet";  ///< a registered model (convnet | dlrm | gpt | linear3 | llama | mlp | torchscript), or graphsage
  std::string init_from;         ///< any model: start from these weights (model.pt, a safetensors file, a Hugging Face directory)
  /// Not a key: set when init_from is gone and this run directory's checkpoints stand in for it
  /// (Note [model.init_from gone] in train_config.h); the model is built without reading init_from.
  std::string init_from_gone_run_dir;
  int64_t num_classes = 10;      ///< classifiers: outputs of the last layer
  int64_t block_size = 1024;     ///< gpt, llama, causal_lm: tokens of context (a sample is block_size + 1 tokens)
  std::string activation_checkpointing = "none";  ///< none | full | every_N: blocks recomputed in backward
  std::string embedding_sharding = "replicate";  ///< replicate | table | row: where an embedding table's rows live
  ConvNetConfig convnet;
  DlrmConfig dlrm;
  MlpConfig mlp;
  GraphSageConfig graphsage;
  GptConfig gpt;
  LlamaConfig llama;
  TorchScriptConfig torchscript;
};

/// Declares the `ModelConfig` keys, bound to `config`, with their defaults, docs and ranges.
/// model.name takes the registry's models and `task_models`, those a task builds itself (the trainer
/// passes the task registry's: graphsage), which this area cannot see.
void declare_config(ConfigSchema& schema, ModelConfig& config, const std::vector<std::string>& task_models = {});

/// Every registered model name, sorted (defined by the registry, so the config's choices follow it).
std::vector<std::string> model_names();

/// Whether model.init_from names (or, gone, named) a Hugging Face directory whose config.json's
/// other keys a gpt or llama run carries to its own: a family with that form, and a path with no
/// weights file's extension (.pt, .pth, .bin, .safetensors).
bool init_from_hugging_face_directory(const ModelConfig& config);

}  // namespace ddp
