#pragma once
// Models chosen by name. Each model lives in one .cpp that registers a factory; see
// Note [Registries] in ddp/common/registry.h for why model_registry.cpp lists them.

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddp/common/registry.h"
#include "ddp/model/model_block.h"
#include "ddp/model/model_config.h"

namespace ddp {

class DeferredInit;
struct ModelContext;
class TokenStepper;

/// Input geometry every model takes: MNIST-format images, one channel of 28x28.
constexpr int64_t kInputChannels = 1;
/// Input image height in pixels.
constexpr int64_t kInputHeight = 28;
/// Input image width in pixels.
constexpr int64_t kInputWidth = 28;
/// Values per flattened input image.
constexpr int64_t kInputSize = kInputChannels * kInputHeight * kInputWidth;

/// A network with one input and one output: the built-in classifiers take float [B, 1, 28, 28] and
/// give logits [B, num_classes]; a TorchScript module takes and gives what it was written for.
class Model : public torch::nn::Module {
 public:
  /// The output for a batch of inputs: by default the blocks in order, through the runner a pass
  /// installed (Note [Blocks]).
  virtual torch::Tensor forward(torch::Tensor x) { return run_blocks(std::move(x)); }

  /// The forward as blocks in order (Note [Blocks]), declared once and the same list forward runs;
  /// empty when it cannot be split (`why_no_blocks`).
  const std::vector<ModelBlock>& blocks();
  /// Why blocks() is empty, as "it is not ...", for the pass that needed them.
  virtual std::string why_no_blocks() const {
    return "it is not a sequence of layers (gpt, llama, mlp, convnet, dlrm and a TorchScript module whose forward "
           "chains its submodules are)";
  }
  /// For a pass that changes how blocks run before any other pass sees them (activation
  /// checkpointing): `wrap` may replace each block's forward, given the block and its index.
  void wrap_blocks(const std::function<void(std::size_t index, ModelBlock& block)>& wrap) {
    blocks();
    for (std::size_t i = 0; i < blocks_.size(); ++i) wrap(i, blocks_[i]);
    wrapped_ = true;
  }
  /// From now on forward runs the blocks through `runner` (null: in order), which must outlive the
  /// model's use.
  void set_block_runner(BlockRunner* runner) { runner_ = runner; }

  /// Its embedding tables, in the order look_up's columns take them (Note [Embedding tables]);
  /// empty for a model without.
  virtual std::vector<EmbeddingTable> embedding_tables() { return {}; }
  /// From now on the tables are looked up through `lookup` (null: in the model's own tensors), which
  /// must outlive the model's use.
  void set_table_lookup(TableLookup* lookup) { lookup_ = lookup; }

  /// The shape of one input sample the model is built for; empty when it does not say (TorchScript:
  /// its first batch shows whether the data fits).
  virtual std::vector<int64_t> input_shape() const { return {kInputChannels, kInputHeight, kInputWidth}; }

  /// Whether the model takes its inputs as the data stores them rather than normalised to float32
  /// (DLRM: 32-bit hashes, which float32 would round); the task refuses data it would normalise.
  virtual bool takes_stored_features() const { return false; }
  /// The size of the output's last dimension (classes, a vocabulary) when the model knows it before
  /// it runs; 0 when only an output shows it (TorchScript).
  virtual int64_t output_width() const { return 0; }

  /// Buffers a training forward may read, by name, which the ranks' own batches may have changed
  /// (a TorchScript module's `self.ema = 0.9 * self.ema + ...`): a pass keeps them equal on every
  /// replica before each step, as DDP's broadcast_buffers does. Not BatchNorm's running statistics,
  /// which training does not read (Note [Lazy buffer broadcast]); none for a built-in family.
  virtual std::vector<std::pair<std::string, torch::Tensor>> buffers_read_in_training() const { return {}; }

  /// Loads a state_dict file (model.pt, or Python's torch.save of one) into the parameters and
  /// buffers; FileError naming what does not match. A family whose files may lack a buffer says so.
  virtual void load_weights(const std::string& path);

  /// What the model computes, where a file gives it (a TorchScript module's code, as
  /// scripted_model.cpp digests it); "" for a built-in family, whose code is ddprun's. Checkpoints record it,
  /// and a resume with other code at the same path is refused (resume_check.h).
  virtual std::string code_fingerprint() const { return ""; }

  /// Writes the trained model in forms besides its weights into `output_dir` (TorchScript:
  /// model_scripted.pt; a family with a Hugging Face twin: config.json). Throws FileError.
  virtual void save_extras(const std::string& output_dir) const { (void)output_dir; }

  /// The weights as model.safetensors holds them, where the family's Hugging Face twin names or lays
  /// them out otherwise than model.pt (the GPT: Note [GPT-2's layout]); empty: model.pt's.
  virtual std::vector<std::pair<std::string, torch::Tensor>> hugging_face_state_dict() const { return {}; }

  /// How a causal language model is read one token at a time for sampling (token_stepper.h);
  /// null for a model that is not one.
  virtual std::unique_ptr<TokenStepper> token_stepper();

  /// What a deferred build left for the passes to give values to (Note [Deferred initialisation]);
  /// null when the model was built whole.
  DeferredInit* deferred_init() const { return deferred_init_.get(); }

  /// The config.json of the Hugging Face directory the model's weights came from (model.init_from:
  /// DIR), read as the model is built, whose other keys (token ids, the context it was made for)
  /// save_extras carries into the model's own: the directory may be gone by the run's end; "" when
  /// none. ddp-export, which builds the model without reading the weights, names the directory.
  const std::string& hugging_face_config() const { return hugging_face_config_; }
  void set_hugging_face_source(const std::string& dir);

  /// nn::Module's moves, which would read a parameter that waits for its values: such a one moves
  /// without them (DeferredInit::move_waiting), and gets them where it now is.
  void to(torch::Device device, torch::Dtype dtype, bool non_blocking = false) override;
  void to(torch::Dtype dtype, bool non_blocking = false) override;
  void to(torch::Device device, bool non_blocking = false) override;

 protected:
  /// The model's blocks, built on first use of blocks(): each model that can be split says what.
  virtual std::vector<ModelBlock> declare_blocks() { return {}; }
  /// Whether a pass acts on the blocks (installed a runner, or wrapped them): a model whose own
  /// forward is not its blocks (TorchScript) then runs them instead.
  bool pass_acts_on_blocks() const { return runner_ != nullptr || wrapped_; }
  /// The blocks (built once) on `x`, through the runner when there is one.
  torch::Tensor run_blocks(torch::Tensor x);
  /// Rows [B, F, dim] of embedding_tables() for `ids` [B, F], through the lookup a pass installed.
  torch::Tensor look_up(const torch::Tensor& ids) {
    return lookup_ ? lookup_->look_up(ids) : look_up_in(embedding_tables(), ids);
  }

 private:
  std::vector<ModelBlock> blocks_;  // declare_blocks(), once
  bool declared_ = false;
  BlockRunner* runner_ = nullptr;
  TableLookup* lookup_ = nullptr;
  bool wrapped_ = false;  // wrap_blocks() was called
  std::shared_ptr<DeferredInit> deferred_init_;
  std::string hugging_face_config_;
  friend std::shared_ptr<Model> make_model(const ModelConfig&, const ModelContext&);
};

/// Sums a tensor over every rank and returns the sum (autograd need not see it). Layers that share
/// statistics across ranks (SyncBatchNorm) take it; unset, the model is built for one process.
using CrossRankSum = std::function<torch::Tensor(const torch::Tensor&)>;

/// What a model gets from the run besides its config.
struct ModelContext {
  CrossRankSum cross_rank_sum;  ///< unset: models that need it fall back to per-process statistics
  bool warn = true;  ///< warn about the model as it loads; false on every rank but 0, so it is said once
  /// Build embedding tables empty ([0, dim]) for a pass to fill with its rows (initial_rows), so that
  /// no rank holds a table whole (Note [Sharded tables]).
  bool defer_tables = false;
  /// When set, the model is built right after LibTorch's generators are seeded with it, one rank
  /// thread at a time (build_seeded, Note [Ranks as threads]): every rank draws the same weights.
  std::optional<uint64_t> seed;
  /// Build the parameters of a family that fills them through init_parameter without storage, for a
  /// pass to give each rank's its values (Note [Deferred initialisation]); needs `seed`, and is
  /// ignored when model.init_from gives the values.
  bool defer_parameters = false;
};

/// Builds a fresh model from its config.
using ModelFactory = std::function<std::shared_ptr<Model>(const ModelConfig&, const ModelContext&)>;

/// Name → factory; each model's register function adds itself here.
using ModelFactories = Registry<ModelFactory>;

/// ConfigError unless model.num_classes leaves a classifier at least kMinClasses outputs: the
/// classifiers' factories call it, so no caller can build a degenerate head.
void check_num_classes(const ModelConfig& config);

/// Writes a trained model into `output_dir`: model.pt (Python's state_dict), model.safetensors
/// (hugging_face_state_dict, or model.pt's tensors; shards above `max_shard_bytes`, by default
/// save_pretrained's 5 GB, as write_hugging_face_weights) and the extras; atomic each; FileError or IoError.
void save_model(const Model& model, const std::string& output_dir, int64_t max_shard_bytes = 5'000'000'000);

/// Builds the model `config.name` names, from model.init_from's weights when set; ConfigError
/// naming model.* on an unknown name or bad value.
std::shared_ptr<Model> make_model(const ModelConfig& config, const ModelContext& context = {});

/// Runs `build`, a model's construction, as `context` asks: right after seeding, one rank thread
/// at a time, when it carries a seed (ModelContext::seed); make_model builds through it, and so
/// must a task that builds its model itself.
void build_model(const ModelContext& context, const std::function<void()>& build);

}  // namespace ddp
