#pragma once
// Hugging Face model directories (Note [Hugging Face directories]): a pretrained model comes in as
// model.init_from: DIR, and a trained Llama goes out as one.

#include <nlohmann/json_fwd.hpp>
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ddp {

// Note [Hugging Face directories]: a model laid out as transformers' save_pretrained writes it:
// config.json (model_type and the architecture's hyperparameters, in Hugging Face's names) and the
// weights, one model.safetensors or shards that model.safetensors.index.json's weight_map lists.
// - model.init_from: DIR reads config.json as model.* keys, applied under the YAML and --set: a key
//   they leave out comes from config.json, and one they set to another value is refused, naming both
//   (train_config.cpp), unless the family says a run may (HuggingFaceKeys). A feature the family does
//   not have (biases, another activation, another rope type) is refused, not ignored.
// - The shards are read as one state dict, in the index's order, each name from the file the index
//   says holds it.
// - A family with a Hugging Face twin writes config.json beside model.safetensors (save_extras), so a
//   run's output directory is itself such a directory: from_pretrained, or model.init_from, reads it.

/// The model keys a config.json describes, and which of them a run may set otherwise.
struct HuggingFaceKeys {
  std::vector<std::string> assignments;  ///< `model.KEY=VALUE`, as --set takes them, in the config's order
  std::vector<std::string> free;         ///< keys of training, not of the weights (a dropout rate)
  /// Keys a run may set lower: a GPT's block_size, whose positions are wpe's first rows (as nanoGPT's
  /// crop_block_size keeps them).
  std::vector<std::string> at_most;
};

/// The model keys that DIR/config.json describes; no assignments when `path` is not a directory.
/// FileError naming config.json and the fault (missing, not JSON, a model_type no family here has, a
/// value of the wrong type, a feature the family lacks).
HuggingFaceKeys hugging_face_model_keys(const std::string& path);

/// Where a Hugging Face directory's weights are.
struct WeightFiles {
  std::vector<std::string> files;  ///< model.safetensors, or each shard once, in the index's order
  std::vector<std::pair<std::string, std::string>> names;  ///< the index's tensor → shard path; empty for one file
};

/// DIR's weight files: model.safetensors, or the shards model.safetensors.index.json's weight_map
/// lists; FileError for a directory with neither, an index that is not one, or a shard outside DIR
/// or missing.
WeightFiles hugging_face_weight_files(const std::string& dir);

/// Writes `tensors` into DIR as save_pretrained does: model.safetensors, or above `max_shard_bytes`
/// shards model-0000K-of-0000N.safetensors (each tensor whole, in order) and
/// model.safetensors.index.json; removes what an earlier export of the other kind left. Atomic each.
void write_hugging_face_weights(const std::string& dir, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                                int64_t max_shard_bytes);

/// Writes `config` as DIR/config.json, indented as transformers writes it; atomic; FileError or IoError.
/// With `carried` (an object: the config.json a model came from, carried_hugging_face_config), its
/// keys that `config` does not set come too (the token ids, the tokenizer's settings), so that a
/// downloaded model fine-tuned and written out keeps them; `config`'s own keys win.
void write_hugging_face_config(const std::string& dir, const nlohmann::json& config, const nlohmann::json& carried);

/// The text of SOURCE/config.json; "" when `source` is "" or holds none that reads.
std::string hugging_face_config_text(const std::string& source);

/// A config.json's `text` as an object, without what every family writes in its own names (the
/// rope settings, the dtype); an empty object when it is "" or not a JSON object.
nlohmann::json carried_hugging_face_config(const std::string& text);

// Each family with a Hugging Face twin reads its config.json, in its own .cpp (hugging_face.cpp
// chooses by model_type): the model.* keys, FileError naming `file` and the fault.
HuggingFaceKeys llama_keys_from_hugging_face(const nlohmann::json& config, const std::string& file);
HuggingFaceKeys gpt_keys_from_hugging_face(const nlohmann::json& config, const std::string& file);

/// One value of config.json as --set writes it: FileError naming `file` and `key` unless it holds
/// what is `expected` (an integer, a number, a boolean); `fallback` when absent or null (the
/// default transformers' config class gives it).
std::string hugging_face_integer(const nlohmann::json& config, const std::string& key, int64_t fallback,
                                 const std::string& file);
std::string hugging_face_number(const nlohmann::json& config, const std::string& key, double fallback,
                                const std::string& file);
std::string hugging_face_bool(const nlohmann::json& config, const std::string& key, bool fallback,
                              const std::string& file);

}  // namespace ddp
