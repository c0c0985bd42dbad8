#include "ddp/loop/train_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "ddp/common/error.h"
#include "ddp/config/config_schema.h"

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

YAML::Node parse_yaml(const std::string& text, const std::string& source) {
  try {
    return YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    // yaml-cpp counts lines and columns from 0; editors count from 1.
    throw ConfigError(source + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1) +
                      ": invalid YAML: " + e.msg + tab_hint(text, e.mark.line + 1));
  } catch (const YAML::Exception& e) {
    throw ConfigError(source + ": invalid YAML: " + e.msg);
  }
}

TrainConfig build(const YAML::Node& root, const std::string& source, const std::filesystem::path& file_dir,
                  const std::vector<std::string>& overrides) {
  TrainConfig config;
  ConfigSchema schema;
  declare_all(schema, config);
  schema.load(root, source);
  schema.resolve_paths(file_dir);  // Note [Relative paths]
  for (const auto& assignment : overrides) schema.apply_override(assignment);
  schema.resolve_paths(std::filesystem::current_path());
  // Only now, so that an override can fix a bad value from the file.
  schema.validate();
  return config;
}

}  // namespace

TrainConfig load_train_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::error_code error;
  if (!std::filesystem::exists(path, error)) throw ConfigError("config file not found: " + path);
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in || std::filesystem::is_directory(path, error)) throw ConfigError("cannot read config file: " + path);
  return build(parse_yaml(text.str(), path), path, std::filesystem::absolute(path).parent_path(), overrides);
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

std::string config_reference_markdown() {
  TrainConfig defaults;
  ConfigSchema schema;
  declare_defaults(schema, defaults);
  return schema.markdown();
}

}  // namespace ddp
