#include "ddp/model/model_registry.h"

#include "ddp/common/error.h"
#include "ddp/model/python_state_dict.h"

namespace ddp {

// Each model's .cpp defines `void register_<name>(ModelFactories&)`, and the list below calls them
// (Note [Registries] in ddp/common/registry.h): adding a model is its .cpp plus one word here.
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
    ModelFactories result("model.name", "model");
#define DDP_CALL_REGISTER(name) register_##name(result);
    DDP_MODELS(DDP_CALL_REGISTER)
#undef DDP_CALL_REGISTER
    return result;
  }();
  return all;
}

}  // namespace

std::shared_ptr<Model> make_model(const ModelConfig& config, const ModelContext& context) {
  const ModelFactory& factory = factories().at(config.name);
  // Checked here as well as in ModelConfig's validation, so no caller can build a degenerate head.
  if (config.name != "torchscript" && config.num_classes < kMinClasses)
    throw ConfigError("model.num_classes: must be >= " + std::to_string(kMinClasses) + ", got " +
                      std::to_string(config.num_classes));
  std::shared_ptr<Model> model = factory(config, context);
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
  return factories().names();
}

}  // namespace ddp
