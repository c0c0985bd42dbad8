#include "ddp/task/causal_lm_task.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <filesystem>

#include "ddp/common/atomic_file.h"
#include "ddp/common/error.h"
#include "ddp/common/text.h"
#include "ddp/data/checksum64.h"
#include "ddp/model/python_state_dict.h"
#include "ddp/model/routed_layers.h"
#include "ddp/task/chunked_cross_entropy.h"
#include "ddp/task/task_registry.h"
#include "ddp/text/tokenizer_ids.h"

namespace ddp {
namespace {

namespace F = torch::nn::functional;

constexpr int64_t kByteVocabulary = 256;

std::string describe(const TokenWindows& windows) {
  int64_t tokens = 0;
  for (const auto& shard : windows.shards()) tokens += shard->tokens();
  return std::to_string(windows.shards().size()) + " shard(s), " + std::to_string(tokens) + " tokens (" +
         windows.shards().front()->format() + "), " + std::to_string(windows.size()) + " windows";
}

}  // namespace

CausalLmTask::CausalLmTask(const DataConfig& data, const ModelConfig& model, const LossConfig& loss,
                           const TaskContext& context)
    : label_smoothing_(loss.label_smoothing) {
  train_.emplace(data.path, "data.path", data.token_dtype, model.block_size);
  if (data.eval_split == "test") eval_.emplace(data.eval_path, "data.eval_path", data.token_dtype, model.block_size);
  if (data.eval_split == "train") eval_.emplace(data.path, "data.path", data.token_dtype, model.block_size);
  const std::string tokenizer = tokenizer_beside(data.path);
  if (std::filesystem::is_regular_file(tokenizer)) tokenizer_model_ = read_whole_file(tokenizer);
  if (context.model.warn) {
    spdlog::info("tokens: data.path {}: {}", data.path, describe(*train_));
    if (eval_) spdlog::info("tokens: data.eval_path {}: {}", data.eval_path, describe(*eval_));
    for (const auto* windows : {&*train_, eval_ ? &*eval_ : nullptr})
      for (const auto& shard : windows ? windows->skipped() : std::vector<TokenWindows::Skipped>{})
        spdlog::warn("tokens: {} holds {} tokens, fewer than one window of model.block_size + 1 = {}: not read (a "
                     "tokenizer's last shard may be that short)", shard.path, shard.tokens, model.block_size + 1);
    // A header says its tokens' type; a data.token_dtype that says otherwise is the user's belief,
    // and wrong: said once, not read.
    auto contradicted = [&data](const TokenWindows& windows) -> const TokenShard* {
      for (const auto& shard : windows.shards())
        if (const std::string& format = shard->format();
            !data.token_dtype.empty() && format.rfind("raw ", 0) != 0 && !format.ends_with(" " + data.token_dtype))
          return shard.get();
      return nullptr;
    };
    const TokenShard* header = contradicted(*train_);
    if (!header && eval_) header = contradicted(*eval_);
    if (header)
      spdlog::warn(
          "data.token_dtype {} is not read: {} has a header that says its tokens are {} (the key is for "
          "headerless files, nanoGPT's train.bin)",
          data.token_dtype, header->path(), header->format());
  }
  model_ = make_model(model, context.model);
  vocab_size_ = model_->output_width();
  model_source_ = "model.vocab_size";
  if (vocab_size_ == 0) {  // a TorchScript module: its output shows its vocabulary
    model_source_ = "model.path " + model.torchscript.path + "'s output width (its vocabulary)";
    vocab_size_ = probe_vocabulary(model.block_size);
  }
  // Before training, not at the first bad batch: the file and byte offset of the first bad token.
  train_->check_vocabulary(vocab_size_, model_source_);
  if (eval_) eval_->check_vocabulary(vocab_size_, model_source_);
  model_->to(context.device);
  // auto: for the built-in families, whose head's output is the model's (a TorchScript module may
  // do more after its lm_head), and where no pass splits the head or frees it between blocks.
  const bool automatic = model.name != "torchscript" && context.head_stays_whole && vocab_size_ >= 32768;
  if (loss.chunked == "on" || (loss.chunked == "auto" && automatic)) chunk_the_loss(loss.chunked, context.model.warn);
}

void CausalLmTask::chunk_the_loss(const std::string& chunked, bool say) {
  std::shared_ptr<RoutedLinear> head;
  for (const auto& item : model_->named_modules("", /*include_self=*/false))
    if (item.key() == "lm_head") head = std::dynamic_pointer_cast<RoutedLinear>(item.value());
  if (!head) {
    if (chunked == "on")
      throw ConfigError("train.chunked_loss: on needs the model's output layer to be a Linear named lm_head (gpt, "
                        "llama, or a TorchScript module's nn.Linear of that name); " + model_source_ +
                        " has none: use auto or off");
    return;
  }
  head->route([](const torch::Tensor& x, const torch::Tensor&, const torch::Tensor&) { return x; });
  const int64_t chunk = loss_chunk_tokens(vocab_size_);
  if (say)
    spdlog::info("train.chunked_loss {}: lm_head and the cross-entropy run {} tokens at a time, the logits of a "
                 "{}-token vocabulary never held whole (Note [Chunked cross-entropy])",
                 chunked, chunk, vocab_size_);
  token_loss_ = [head, chunk](const torch::Tensor& hidden, const torch::Tensor& targets, double smoothing) {
    return chunked_cross_entropy(hidden, head->weight, head->bias, targets, smoothing, chunk);
  };
}

int64_t CausalLmTask::size(Split split) const {
  if (split == Split::kTrain) return train_->size();
  return eval_ ? eval_->size() : 0;
}

std::string CausalLmTask::data_content() const {
  Checksum64 sum;
  for (const auto& shard : train_->shards()) {
    const uint64_t shard_sum = shard->sampled_checksum();
    sum.update(&shard_sum, sizeof shard_sum);
  }
  return fmt::format("{:016x}", sum.digest());
}

std::string CausalLmTask::data_fingerprint() const {
  std::string lines;
  for (const auto& shard : train_->shards())
    lines += shard->path() + ": " + std::to_string(shard->bytes()) + " bytes\n" + kDataContentLine + shard->path() +
             fmt::format(": XXH64 {:016x} of sampled blocks\n", shard->sampled_checksum());
  return lines + "training windows: " + std::to_string(train_->size()) + "\n";
}

Batch CausalLmTask::make_batch(Split split, const torch::Tensor& indices) const {
  const TokenWindows& windows = split == Split::kTrain ? *train_ : *eval_;
  torch::Tensor rows = windows.read(indices.to(torch::kLong));
  const int64_t t = windows.block_size();
  Batch batch;
  batch.inputs = {rows.narrow(1, 0, t).contiguous()};
  batch.targets = rows.narrow(1, 1, t).contiguous();
  batch.tokens = batch.targets.numel();
  return batch;
}

// A TorchScript module says its vocabulary only by its output: one forward of zeros, in eval mode
// (no dropout, so no random draws), shows V before any batch could index outside it.
int64_t CausalLmTask::probe_vocabulary(int64_t block_size) {
  torch::NoGradGuard no_grad;
  bool was_training = model_->is_training();
  model_->eval();
  torch::Tensor out = model_->forward(torch::zeros({1, block_size}, torch::kLong));
  model_->train(was_training);
  if (out.dim() != 3 || out.size(0) != 1 || out.size(1) != block_size || out.size(2) < 1)
    throw UserError("model.path: train.task causal_lm needs logits [B, T, V] for tokens [B, T]; for [1, " +
                    std::to_string(block_size) + "] it returned " + format_shape(out.sizes().vec()));
  return out.size(2);
}

torch::Tensor CausalLmTask::logits(const Batch& batch) { return model_->forward(batch.inputs[0]); }

torch::Tensor CausalLmTask::loss(const Batch& batch) { return output_loss(logits(batch), batch); }

torch::Tensor CausalLmTask::metric_sums(const Batch& batch) { return output_metric_sums(logits(batch), batch); }

torch::Tensor CausalLmTask::output_loss(const torch::Tensor& out, const Batch& batch) {
  if (token_loss_)
    return token_loss_(out.reshape({-1, out.size(-1)}), batch.targets.reshape({-1}), label_smoothing_).mean();
  return F::cross_entropy(out.reshape({-1, out.size(-1)}), batch.targets.reshape({-1}),
                          F::CrossEntropyFuncOptions().label_smoothing(label_smoothing_));
}

torch::Tensor CausalLmTask::output_metric_sums(const torch::Tensor& out, const Batch& batch) {
  auto logits = out.reshape({-1, out.size(-1)}).to(torch::kFloat);
  auto per_token = token_loss_ ? token_loss_(logits, batch.targets.reshape({-1}), 0.0)
                               : F::cross_entropy(logits, batch.targets.reshape({-1}),
                                                  F::CrossEntropyFuncOptions().reduction(torch::kNone));
  return per_token.view({batch.targets.size(0), -1}).mean(1).to(torch::kDouble).sum().reshape({1});
}

void CausalLmTask::add_derived_metrics(std::vector<std::pair<std::string, double>>& means) const {
  double loss = means.front().second;
  means.emplace_back("perplexity", std::exp(loss));
  if (vocab_size_ == kByteVocabulary) means.emplace_back("bits_per_byte", loss / std::log(2.0));
}

void CausalLmTask::save_model(const std::string& output_dir) const {
  ddp::save_model(*model_, output_dir);
  if (tokenizer_model_.empty()) return;
  write_file_atomically(output_dir + "/tokenizer.model", tokenizer_model_);
  write_tokenizer_ids(output_dir);
}

void register_causal_lm_tasks(TaskRegistrations& tasks) {
  tasks.add("causal_lm", {DatasetKind::kTokens, {"cross_entropy"}, {"gpt", "llama", "torchscript"},
                          [](const DataConfig& data, const SamplerConfig&, const ModelConfig& model,
                             const LossConfig& loss, const TaskContext& context) -> std::unique_ptr<Task> {
                            return std::make_unique<CausalLmTask>(data, model, loss, context);
                          }});
}

}  // namespace ddp
