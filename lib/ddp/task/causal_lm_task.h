#pragma once
// Language modelling: a sample is a window of model.block_size + 1 tokens of the token shards
// (ddp/data/token_shards.h); the model reads the first block_size and predicts each next token.

#include <optional>
#include <utility>

#include "ddp/data/token_shards.h"
#include "ddp/task/task.h"

namespace ddp {

/// `train.task: causal_lm`: `model.name: gpt`, or a TorchScript module taking int64 [B, T] and giving
/// logits [B, T, V], on `data.dataset: tokens`, cross-entropy over every position.
class CausalLmTask : public Task {
 public:
  /// Maps the shards, builds the model from the global RNG and checks every token against the
  /// model's vocabulary (a TorchScript module's: its output width for a probe of zeros). FileError naming the file
  /// and byte offset at fault; ConfigError naming the key.
  CausalLmTask(const DataConfig& data, const ModelConfig& model, const LossConfig& loss, const TaskContext& context);

  torch::nn::Module& model() override { return *model_; }
  int64_t size(Split split) const override;
  /// Each shard of data.path with its size in bytes, and the window count.
  std::string data_content() const override;
  std::string data_fingerprint() const override;
  /// inputs = {tokens int64 [B, T]}, targets = the next tokens int64 [B, T].
  Batch make_batch(Split split, const torch::Tensor& indices) const override;
  torch::Tensor loss(const Batch& batch) override;
  torch::Tensor output_loss(const torch::Tensor& output, const Batch& batch) override;
  torch::Tensor output_metric_sums(const torch::Tensor& output, const Batch& batch) override;
  /// loss: the mean per-token cross-entropy (nats), averaged over windows.
  std::vector<std::string> metric_names() const override { return {"loss"}; }
  torch::Tensor metric_sums(const Batch& batch) override;
  /// perplexity = exp(loss); bits_per_byte = loss / ln 2 when the vocabulary is bytes (256 ids).
  void add_derived_metrics(std::vector<std::pair<std::string, double>>& means) const override;
  void save_model(const std::string& output_dir) const override;
  bool take_token_loss(TokenLoss loss) override {
    token_loss_ = std::move(loss);
    return true;
  }

 private:
  torch::Tensor logits(const Batch& batch);
  int64_t probe_vocabulary(int64_t block_size);
  /// train.chunked_loss on, or auto where it applies: the model's lm_head gives its input, and the loss
  /// makes the logits a chunk at a time (Note [Chunked cross-entropy]); on without an lm_head is a
  /// ConfigError.
  void chunk_the_loss(const std::string& chunked, bool say);

  std::optional<TokenWindows> train_, eval_;
  std::shared_ptr<Model> model_;
  std::string model_source_;  ///< names the model in messages: "model.vocab_size 256" or model.path
  int64_t vocab_size_ = 0;    ///< model.vocab_size, or a TorchScript module's output width
  double label_smoothing_ = 0;
  TokenLoss token_loss_;  ///< a pass's, or unset: F::cross_entropy over the whole vocabulary
  /// The tokenizer.model beside data.path as the run began ("" if none): the end of the run writes
  /// it beside model.pt, so that the run directory keeps the tokenizer its tokens were made with.
  std::string tokenizer_model_;
};

}  // namespace ddp
