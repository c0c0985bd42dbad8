#include "ddp/model/model_registry.h"
#include "ddp/model/token_stepper.h"

#include <filesystem>
#include <optional>
#include <stdexcept>

#include "ddp/common/error.h"
#include "ddp/model/deferred_init.h"
#include "ddp/model/python_state_dict.h"
#include "ddp/model/rank_random.h"
#include "ddp/model/hugging_face.h"

namespace ddp {

// Each model's .cpp defines `void register_<name>(ModelFactories&)`, and the list below calls them
// (Note [Registries] in ddp/common/registry.h): adding a model is its .cpp plus one word here.
#define DDP_MODELS(X) \
  X(convnet)          \
  X(dlrm)             \
  X(gpt)              \
  X(linear3)          \
  X(llama)            \
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
  std::shared_ptr<Model> model;
  auto deferred = context.defer_parameters && context.seed ? std::make_shared<DeferredInit>() : nullptr;
  {
    std::optional<DeferredBuild> scope;
    if (deferred) scope.emplace(*deferred);
    build_model(context, [&] { model = factories().at(config.name)(config, context); });
    // A family that deferred its build reads model.init_from's values when a pass gives a parameter
    // them; one that built whole (Note [Deferred initialisation]) reads them now.
    if (deferred && deferred->pending() == 0) scope.reset();
    if (!config.init_from.empty() && config.init_from_gone_run_dir.empty()) {
      try {
        model->load_weights(config.init_from);
      } catch (const FileError& e) {
        throw FileError(std::string("model.init_from: ") + e.what());
      }
    }
  }
  if (deferred && deferred->pending() > 0) model->deferred_init_ = std::move(deferred);
  // Note [model.init_from gone]: the run's own config.json, written when it ended before, carries
  // what init_from's did.
  model->set_hugging_face_source(config.init_from_gone_run_dir.empty() ? config.init_from
                                                                       : config.init_from_gone_run_dir);
  return model;
}

void Model::set_hugging_face_source(const std::string& dir) {
  std::error_code error;
  hugging_face_config_ = !dir.empty() && std::filesystem::is_directory(dir, error) ? hugging_face_config_text(dir) : "";
}

void build_model(const ModelContext& context, const std::function<void()>& build) {
  if (context.seed)
    build_seeded(*context.seed, build);
  else
    build();
}

void Model::load_weights(const std::string& path) { load_python_state_dict(*this, path); }

void Model::to(torch::Device device, torch::Dtype dtype, bool non_blocking) {
  if (deferred_init_) deferred_init_->move_waiting(device, dtype);
  torch::nn::Module::to(device, dtype, non_blocking);  // a waiting tensor is where it goes: not read
}

void Model::to(torch::Dtype dtype, bool non_blocking) {
  if (deferred_init_) deferred_init_->move_waiting(std::nullopt, dtype);
  torch::nn::Module::to(dtype, non_blocking);
}

void Model::to(torch::Device device, bool non_blocking) {
  if (deferred_init_) deferred_init_->move_waiting(device, std::nullopt);
  torch::nn::Module::to(device, non_blocking);
}

std::unique_ptr<TokenStepper> Model::token_stepper() { return nullptr; }

void save_model(const Model& model, const std::string& output_dir, int64_t max_shard_bytes) {
  save_python_state_dict(model, output_dir + "/model.pt");
  auto exported = model.hugging_face_state_dict();
  write_hugging_face_weights(output_dir, exported.empty() ? python_state_dict(model) : exported, max_shard_bytes);
  model.save_extras(output_dir);
}

const std::vector<ModelBlock>& Model::blocks() {
  if (!declared_) blocks_ = declare_blocks();
  declared_ = true;
  return blocks_;
}

torch::Tensor Model::run_blocks(torch::Tensor x) {
  // A model without blocks that kept the default forward would pass its input through untouched.
  if (blocks().empty()) throw std::logic_error("a model without declare_blocks() must override forward()");
  return runner_ ? runner_->run(blocks_, std::move(x)) : run_in_order(blocks_, std::move(x));
}

void check_num_classes(const ModelConfig& config) {
  if (config.num_classes < kMinClasses)
    throw ConfigError("model.num_classes: must be >= " + std::to_string(kMinClasses) + ", got " +
                      std::to_string(config.num_classes));
}

std::vector<std::string> model_names() {
  return factories().names();
}

}  // namespace ddp
