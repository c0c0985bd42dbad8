// A multilayer perceptron: flatten, then Linear+ReLU per `hidden` width, then Linear to the classes.
// All layers sit in one Sequential named `layers`, as in scripts/ddp_models.py's MLP, so the Linear
// weights are layers.0.weight, layers.2.weight, ... (ReLUs take the odd indices) and the flatten,
// which has no parameters, stays outside to keep those indices simple.

#include <torch/nn.h>

#include "ddp/common/error.h"
#include "ddp/model/model_registry.h"

namespace ddp {
namespace {

class Mlp : public Model {
 public:
  explicit Mlp(const ModelConfig& config) {
    torch::nn::Sequential layers;
    int64_t width = kInputSize;
    for (int64_t hidden : config.hidden) {
      linears_.emplace_back(width, hidden);
      layers->push_back(linears_.back());
      layers->push_back(torch::nn::ReLU());
      width = hidden;
    }
    linears_.emplace_back(width, config.num_classes);
    layers->push_back(linears_.back());
    register_module("layers", layers);
  }

  // The Sequential's forward, one Linear at a time: each is a shard unit.
  torch::Tensor forward(torch::Tensor x) override {
    enter_shard_root();
    x = x.reshape({x.size(0), -1});
    for (std::size_t i = 0; i < linears_.size(); ++i) {
      x = run_unit(i, [&] { return linears_[i]->forward(x); });
      if (i + 1 < linears_.size()) x = torch::relu(x);
    }
    return x;
  }

  std::vector<std::shared_ptr<torch::nn::Module>> shard_units() override {
    std::vector<std::shared_ptr<torch::nn::Module>> units;
    for (const auto& linear : linears_) units.push_back(linear.ptr());
    return units;
  }

  // Each Linear with its ReLU, under the Sequential's name (layers.0, layers.2, ...).
  std::vector<PipelineLayer> pipeline_layers() override {
    std::vector<PipelineLayer> layers;
    for (std::size_t i = 0; i < linears_.size(); ++i) {
      bool first = i == 0, last = i + 1 == linears_.size();
      layers.push_back({"layers." + std::to_string(2 * i), linears_[i]->parameters(), {},
                        [linear = linears_[i].ptr(), first, last](torch::Tensor x) {
                          if (first) x = x.reshape({x.size(0), -1});
                          x = linear->forward(x);
                          return last ? x : torch::relu(x);
                        }});
    }
    return layers;
  }

 private:
  std::vector<torch::nn::Linear> linears_;
};

}  // namespace

/// Registers "mlp"; called from model_registry.cpp (Note [Registries]).
void register_mlp(ModelFactories& factories) {
  factories.add("mlp", [](const ModelConfig& config, const ModelContext&) {
    for (int64_t width : config.hidden)
      if (width < 1) throw ConfigError("model.hidden: widths must be >= 1, got " + std::to_string(width));
    return std::make_shared<Mlp>(config);
  });
}

}  // namespace ddp
