// A multilayer perceptron: flatten, then Linear+ReLU per `hidden` width, then Linear to the classes.
// All layers sit in one Sequential named `layers`, as in scripts/ddp_models.py's MLP, so the Linear
// weights are layers.0.weight, layers.2.weight, ... (ReLUs take the odd indices) and the flatten,
// which has no parameters, stays outside to keep those indices simple.

#include <torch/nn.h>

#include "ddp/common/error.h"
#include "ddp/config/config_schema.h"
#include "ddp/model/drawn_layers.h"
#include "ddp/model/model_registry.h"

namespace ddp {
namespace {

class Mlp : public Model {
 public:
  explicit Mlp(const ModelConfig& config) {
    torch::nn::Sequential layers;
    int64_t width = kInputSize;
    for (int64_t hidden : config.mlp.hidden) {
      linears_.push_back(drawn_linear(width, hidden));
      layers->push_back(linears_.back());
      layers->push_back(torch::nn::ReLU());
      width = hidden;
    }
    linears_.push_back(drawn_linear(width, config.num_classes));
    layers->push_back(linears_.back());
    register_module("layers", layers);
  }

  // Each Linear with its ReLU, under the Sequential's name (layers.0, layers.2, ...): the
  // Sequential's forward, one Linear at a time.
  std::vector<ModelBlock> declare_blocks() override {
    std::vector<ModelBlock> blocks;
    for (std::size_t i = 0; i < linears_.size(); ++i) {
      bool first = i == 0, last = i + 1 == linears_.size();
      blocks.push_back({"layers." + std::to_string(2 * i), linears_[i]->parameters(), {},
                        [linear = linears_[i].ptr(), first, last](torch::Tensor x) {
                          if (first) x = x.reshape({x.size(0), -1});
                          x = linear->forward(x);
                          return last ? x : torch::relu(x);
                        }});
    }
    return blocks;
  }

 private:
  std::vector<torch::nn::Linear> linears_;
};

}  // namespace

void declare_config(ConfigSchema& schema, MlpConfig& config, const std::string& model_name) {
  schema.add("model.hidden", &config.hidden, "mlp: hidden layer widths, input side first").min(1).max(1e6);
  schema.rule("model.hidden", [&config, &model_name]() -> std::string {
    return model_name == "mlp" && config.hidden.empty() ? "must not be empty when model.name is mlp" : "";
  });
}

/// Registers "mlp"; called from model_registry.cpp (Note [Registries]).
void register_mlp(ModelFactories& factories) {
  factories.add("mlp", [](const ModelConfig& config, const ModelContext&) {
    check_num_classes(config);
    for (int64_t width : config.mlp.hidden)
      if (width < 1) throw ConfigError("model.hidden: widths must be >= 1, got " + std::to_string(width));
    return std::make_shared<Mlp>(config);
  });
}

}  // namespace ddp
