#include "ddp/model/hugging_face.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <regex>
#include <set>

#include "ddp/common/atomic_file.h"
#include "ddp/common/error.h"
#include "ddp/model/safetensors.h"

namespace ddp {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr const char* kConfig = "config.json";
constexpr const char* kWeights = "model.safetensors";
constexpr const char* kIndex = "model.safetensors.index.json";

using KeysReader = HuggingFaceKeys (*)(const Json&, const std::string&);

// model_type → the family that reads it (Note [Hugging Face directories]).
const std::map<std::string, KeysReader>& readers() {
  static const std::map<std::string, KeysReader> all = {{"llama", &llama_keys_from_hugging_face},
                                                         {"gpt2", &gpt_keys_from_hugging_face}};
  return all;
}

Json read_json(const std::string& path) {
  try {
    return Json::parse(read_whole_file(path));
  } catch (const Json::exception& e) {  // a parse error, or a number beyond a double's range
    throw FileError(path + ": not JSON that can be read (" + e.what() + ")");
  }
}

// The value at `key`; null when it is missing or null (transformers then takes its default).
const Json* value_at(const Json& config, const std::string& key) {
  auto found = config.find(key);
  return found == config.end() || found->is_null() ? nullptr : &*found;
}

[[noreturn]] void wrong_type(const Json& value, const std::string& key, const std::string& expected,
                             const std::string& file) {
  throw FileError(file + ": " + key + ": expected " + expected + ", got " + value.dump());
}

}  // namespace

std::string hugging_face_integer(const Json& config, const std::string& key, int64_t fallback, const std::string& file) {
  const Json* value = value_at(config, key);
  if (!value) return std::to_string(fallback);
  if (!value->is_number_integer()) wrong_type(*value, key, "an integer", file);
  return std::to_string(value->get<int64_t>());
}

std::string hugging_face_number(const Json& config, const std::string& key, double fallback, const std::string& file) {
  const Json* value = value_at(config, key);
  if (value && !value->is_number()) wrong_type(*value, key, "a number", file);
  double number = value ? value->get<double>() : fallback;
  if (!std::isfinite(number)) wrong_type(*value, key, "a finite number", file);
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", number);  // read back to the same double
  return text;
}

std::string hugging_face_bool(const Json& config, const std::string& key, bool fallback, const std::string& file) {
  const Json* value = value_at(config, key);
  if (value && !value->is_boolean()) wrong_type(*value, key, "true or false", file);
  return (value ? value->get<bool>() : fallback) ? "true" : "false";
}

HuggingFaceKeys hugging_face_model_keys(const std::string& path) {
  std::error_code error;
  if (path.empty() || !fs::is_directory(path, error)) return {};
  const std::string file = (fs::path(path) / kConfig).string();
  if (!fs::exists(file, error))
    throw FileError(path + " is a directory without a " + kConfig + ": model.init_from takes a Hugging Face model "
                    "directory (config.json and model.safetensors, as save_pretrained writes them) or a weights file");
  Json config = read_json(file);
  if (!config.is_object()) throw FileError(file + ": expected a JSON object, got " + std::string(config.type_name()));
  const Json* type = value_at(config, "model_type");
  if (!type || !type->is_string()) throw FileError(file + ": no model_type string, so the architecture is unknown");
  auto reader = readers().find(type->get<std::string>());
  if (reader == readers().end()) {
    std::string known;
    for (const auto& [name, _] : readers()) known += (known.empty() ? "" : ", ") + name;
    throw FileError(file + ": model_type " + type->dump() + " is no architecture ddprun has (it reads " + known + ")");
  }
  return reader->second(config, file);
}

WeightFiles hugging_face_weight_files(const std::string& dir) {
  std::error_code error;
  WeightFiles weights;
  const fs::path root(dir);
  if (fs::exists(root / kWeights, error)) {
    weights.files.push_back((root / kWeights).string());
    return weights;
  }
  const std::string index = (root / kIndex).string();
  if (!fs::exists(index, error))
    throw FileError(dir + " is a directory with neither " + kWeights + " nor " + kIndex +
                    "; name the weights file in it (a run's model.pt, say)");
  Json json = read_json(index);
  const Json* map = json.is_object() ? value_at(json, "weight_map") : nullptr;
  if (!map || !map->is_object()) throw FileError(index + ": no weight_map object (tensor name → shard file)");
  std::set<std::string> seen;
  for (const auto& [name, shard] : map->items()) {
    if (!shard.is_string()) wrong_type(shard, "weight_map." + name, "a file name", index);
    const std::string file = shard.get<std::string>();
    // A shard is a name in the directory: an index must not reach outside it.
    if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..")
      throw FileError(index + ": weight_map." + name + ": \"" + file + "\" is not a file name in " + dir);
    const std::string path = (root / file).string();
    if (seen.insert(file).second) {
      if (!fs::is_regular_file(path, error))
        throw FileError(index + ": weight_map." + name + " is in " + file + ", which is not in " + dir);
      weights.files.push_back(path);
    }
    weights.names.emplace_back(name, path);
  }
  if (weights.files.empty()) throw FileError(index + ": weight_map lists no tensor");
  return weights;
}

void write_hugging_face_weights(const std::string& dir, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                                int64_t max_shard_bytes) {
  const fs::path root(dir);
  const std::regex shard_name(R"(model-\d{5}-of-\d{5}\.safetensors)");
  auto remove_shards = [&](const std::set<std::string>& keep) {
    for (const auto& entry : fs::directory_iterator(root))
      if (std::regex_match(entry.path().filename().string(), shard_name) && !keep.count(entry.path().filename().string()))
        fs::remove(entry.path());
  };
  // Shards of at most max_shard_bytes, each tensor whole in one, in the given order.
  std::vector<std::vector<std::pair<std::string, torch::Tensor>>> shards(1);
  int64_t total = 0, in_shard = 0;
  for (const auto& [name, tensor] : tensors) {
    const int64_t bytes = tensor.numel() * static_cast<int64_t>(tensor.element_size());
    if (in_shard > 0 && in_shard + bytes > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().emplace_back(name, tensor);
    in_shard += bytes;
    total += bytes;
  }
  if (shards.size() == 1) {
    write_safetensors((root / kWeights).string(), tensors, {{"format", "pt"}});
    fs::remove(root / kIndex);  // an earlier, sharded export's: the one file must not be shadowed
    remove_shards({});
    return;
  }
  Json weight_map = Json::object();
  std::set<std::string> files;
  for (std::size_t i = 0; i < shards.size(); ++i) {
    char file[64];
    std::snprintf(file, sizeof file, "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    write_safetensors((root / file).string(), shards[i], {{"format", "pt"}});
    for (const auto& entry : shards[i]) weight_map[entry.first] = file;
    files.insert(file);
  }
  // model.safetensors would be read instead of the index (as transformers does): it goes first.
  fs::remove(root / kWeights);
  write_file_atomically((root / kIndex).string(),
                        Json{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}.dump(2) + "\n");
  remove_shards(files);
}

void write_hugging_face_config(const std::string& dir, const Json& config, const Json& carried) {
  Json merged = carried.is_object() ? carried : Json::object();
  merged.update(config);
  write_file_atomically((fs::path(dir) / kConfig).string(), merged.dump(2) + "\n");
}

std::string hugging_face_config_text(const std::string& source) {
  std::error_code error;
  if (source.empty() || !fs::is_regular_file(fs::path(source) / kConfig, error)) return "";
  try {
    return read_whole_file((fs::path(source) / kConfig).string());
  } catch (const FileError&) {
    return "";
  }
}

Json carried_hugging_face_config(const std::string& text) {
  if (text.empty()) return Json::object();
  Json config = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object()) return Json::object();  // model.init_from read it whole when the run began
  // transformers 5's names for what the families write as rope_theta, rope_scaling and torch_dtype.
  for (const char* written_otherwise : {"rope_parameters", "dtype"}) config.erase(written_otherwise);
  return config;
}

}  // namespace ddp
