#include "ddp/model/model_registry.h"

#include "ddp/common/error.h"
#include "ddp/common/text.h"
#include "ddp/model/python_state_dict.h"

namespace ddp {

// Note [Model registration]
// Each model's .cpp defines `void register_<name>(ModelFactories&)`, and the list below calls them.
// The usual trick, a static object in the model's .cpp whose constructor registers it, silently
// fails here: ddp_model is a static library, and the linker only pulls an object file out of an
// archive when something references one of its symbols. Nothing references a self-registering
// object, so the model would vanish from the binary with no error. Naming each register function
// here is that reference: adding a model is its .cpp plus one word in DDP_MODELS, and a name
// without a definition is a link error rather than a model that is missing at run time.
#define DDP_MODELS(X) \
  X(convnet)          \
  X(linear3)          \
  X(mlp)              \
  X(torchscript)

#define DDP_DECLARE_REGISTER(name) void register_##name(ModelFactories& factories);
DDP_MODELS(DDP_DECLARE_REGISTER)
#undef DDP_DECLARE_REGISTER

namespace {

const ModelFactories& factories() {
  static const ModelFactories all = [] {
    ModelFactories result;
#define DDP_CALL_REGISTER(name) register_##name(result);
    DDP_MODELS(DDP_CALL_REGISTER)
#undef DDP_CALL_REGISTER
    return result;
  }();
  return all;
}

std::string join(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& word : words) out += (out.empty() ? "" : ", ") + word;
  return out;
}

}  // namespace

std::shared_ptr<Model> make_model(const ModelConfig& config, const ModelContext& context) {
  auto found = factories().find(config.name);
  if (found == factories().end()) {
    std::vector<std::string> names = model_names();
    std::string message = "model.name: unknown model \"" + config.name + "\"";
    if (auto suggestion = nearest(config.name, names)) message += " (did you mean " + *suggestion + "?)";
    throw ConfigError(message + "; available: " + join(names));
  }
  // Checked here as well as in ModelConfig's validation, so no caller can build a degenerate head.
  if (config.name != "torchscript" && config.num_classes < kMinClasses)
    throw ConfigError("model.num_classes: must be >= " + std::to_string(kMinClasses) + ", got " +
                      std::to_string(config.num_classes));
  std::shared_ptr<Model> model = found->second(config, context);
  if (!config.init_from.empty()) {
    try {
      load_python_state_dict(*model, config.init_from);
    } catch (const FileError& e) {
      throw FileError(std::string("model.init_from: ") + e.what());
    }
  }
  return model;
}

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const auto& [name, factory] : factories()) names.push_back(name);
  return names;
}

}  // namespace ddp
