#pragma once
// Models chosen by name. Each model lives in one .cpp that registers a factory; see
// Note [Registries] in ddp/common/registry.h for why model_registry.cpp lists them.

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ddp/common/registry.h"
#include "ddp/model/model_config.h"

namespace ddp {

/// Input geometry every model takes: MNIST-format images, one channel of 28x28.
constexpr int64_t kInputChannels = 1;
/// Input image height in pixels.
constexpr int64_t kInputHeight = 28;
/// Input image width in pixels.
constexpr int64_t kInputWidth = 28;
/// Values per flattened input image.
constexpr int64_t kInputSize = kInputChannels * kInputHeight * kInputWidth;

/// Where a model's forward lets sharded data parallelism in (dist.shard: parameters gathers a unit's
/// parameters before it runs and frees them after; Note [Unit hooks] in ddp/parallel).
class ShardUnitHooks {
 public:
  virtual ~ShardUnitHooks() = default;
  /// As forward starts: the root's parameters (those of no unit) are needed.
  virtual void before_root() = 0;
  /// Unit `unit` (an index into Model::shard_units()) is about to run.
  virtual void before_unit(std::size_t unit) = 0;
  /// It ran and gave `output`, through which backward will reach it; returns what forward goes on with.
  virtual torch::Tensor after_unit(std::size_t unit, torch::Tensor output) = 0;
};

/// A piece of a model's forward, for pipeline stages (dist.pipeline): a stage runs a contiguous run
/// of the model's layers, the first taking the model's input, each the previous one's output, the
/// last giving the model's output.
struct PipelineLayer {
  std::string name;                       ///< "transformer.h.3": what dist.pipeline_split names
  std::vector<torch::Tensor> parameters;  ///< those it uses (a tied weight is in two layers)
  std::vector<torch::Tensor> buffers;     ///< those it keeps (BatchNorm statistics, masks)
  std::function<torch::Tensor(torch::Tensor)> forward;
};

/// A network with one input and one output: the built-in classifiers take float [B, 1, 28, 28] and
/// give logits [B, num_classes]; a TorchScript module takes and gives what it was written for.
class Model : public torch::nn::Module {
 public:
  /// The output for a batch of inputs.
  virtual torch::Tensor forward(torch::Tensor x) = 0;

  /// The shape of one input sample the model is built for; empty when it does not say (TorchScript:
  /// its first batch shows whether the data fits).
  virtual std::vector<int64_t> input_shape() const { return {kInputChannels, kInputHeight, kInputWidth}; }

  /// Writes the trained model in forms besides model.pt's state_dict into `output_dir`
  /// (TorchScript: model_scripted.pt). Throws FileError.
  virtual void save_extras(const std::string& output_dir) const { (void)output_dir; }

  /// The modules whose parameters dist.shard: parameters gathers together, in forward order (a GPT
  /// block, an MLP layer, a scripted nn.Sequential's child); empty when the forward cannot say when
  /// each runs (other TorchScript modules).
  virtual std::vector<std::shared_ptr<torch::nn::Module>> shard_units() { return {}; }
  /// The forward as layers in order, for pipeline stages; empty when it cannot be split (a TorchScript
  /// module other than an nn.Sequential, whose compiled forward calls its children where it likes).
  virtual std::vector<PipelineLayer> pipeline_layers() { return {}; }
  /// Makes forward call `hooks` (null: stop), which must outlive the model's use.
  void set_shard_hooks(ShardUnitHooks* hooks) { shard_hooks_ = hooks; }

 protected:
  /// Whether forward must call the hooks: the model runs unit by unit.
  bool has_shard_hooks() const { return shard_hooks_ != nullptr; }
  /// In forward, before the root's parameters are used.
  void enter_shard_root() {
    if (shard_hooks_) shard_hooks_->before_root();
  }
  /// In forward: runs unit `unit` as `forward()`, inside the hooks.
  template <typename Forward>
  torch::Tensor run_unit(std::size_t unit, Forward&& forward) {
    if (!shard_hooks_) return forward();
    shard_hooks_->before_unit(unit);
    return shard_hooks_->after_unit(unit, forward());
  }

 private:
  ShardUnitHooks* shard_hooks_ = nullptr;
};

/// Sums a tensor over every rank and returns the sum (autograd need not see it). Layers that share
/// statistics across ranks (SyncBatchNorm) take it; unset, the model is built for one process.
using CrossRankSum = std::function<torch::Tensor(const torch::Tensor&)>;

/// What a model gets from the run besides its config.
struct ModelContext {
  CrossRankSum cross_rank_sum;  ///< unset: models that need it fall back to per-process statistics
  bool warn = true;  ///< warn about the model as it loads; false on every rank but 0, so it is said once
};

/// Builds a fresh model from its config.
using ModelFactory = std::function<std::shared_ptr<Model>(const ModelConfig&, const ModelContext&)>;

/// Name → factory; each model's register function adds itself here.
using ModelFactories = Registry<ModelFactory>;

/// Builds the model `config.name` names; ConfigError naming model.* on an unknown name or bad value.
std::shared_ptr<Model> make_model(const ModelConfig& config, const ModelContext& context = {});

}  // namespace ddp
