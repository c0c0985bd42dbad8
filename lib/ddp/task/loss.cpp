#include "ddp/task/loss.h"

#include <spdlog/fmt/fmt.h>
#include <torch/nn/functional/loss.h>

#include <cmath>
#include <limits>

#include "ddp/common/error.h"
#include "ddp/common/text.h"
#include "ddp/config/config_schema.h"

namespace ddp {
namespace {

namespace F = torch::nn::functional;

std::string shape(const torch::Tensor& x) { return format_shape(x.sizes().vec()); }

// Per-sample means of an elementwise quantity [B, ...] → [B].
torch::Tensor per_sample(const torch::Tensor& values) {
  return values.dim() > 1 ? values.flatten(1).mean(1) : values;  // flatten: an empty batch has no -1 to infer
}


}  // namespace

void declare_config(ConfigSchema& schema, LossConfig& config) {
  schema.add("train.loss", &config.loss,
             "cross_entropy: class logits [B, C] against int labels; mse: regression (train.task regression); "
             "bce_with_logits: binary (or multi-label) logits against 0/1 targets")
      .choices({"cross_entropy", "mse", "bce_with_logits"});
  schema.add("train.label_smoothing", &config.label_smoothing, "cross_entropy: label smoothing, as PyTorch's")
      .min(0)
      .max(1);
  schema.add("train.chunked_loss", &config.chunked,
             "causal_lm: compute the head's logits and the cross-entropy together, a chunk of tokens at a time, "
             "again in backward, so the [tokens, vocabulary] float32 logits are never held whole (one more matrix "
             "product of the head); on: for a model whose output layer is lm_head (gpt, llama, a TorchScript module's "
             "nn.Linear of that name); auto: on for gpt and llama from a vocabulary of 32768, unless dist.tensor "
             "splits the head or dist.shard parameters frees it between blocks")
      .choices({"auto", "on", "off"});
}

torch::Tensor Loss::prepare_targets(const torch::Tensor& labels, const std::string& source,
                                    const torch::Tensor& source_rows) const {
  // A sample is named by its index in the file (`source_rows`: a split carved from it), not in the split.
  auto in_source = [&](int64_t sample) { return source_rows.defined() ? source_rows[sample].item<int64_t>() : sample; };
  if (!classes()) {
    // bce_with_logits weighs a sample's negatives by 1 - target (Note [Exact AUC]): a
    // target of 2 would count as a negative of weight -1, a wrong AUC with exit 0.
    if (config_.loss == "bce_with_logits" && labels.numel() > 0) {
      auto bad = torch::logical_or(labels.lt(0), labels.gt(1)).reshape({labels.size(0), -1}).any(1).nonzero();
      if (bad.numel() > 0) {
        const int64_t sample = bad[0][0].item<int64_t>();
        auto row = labels[sample].reshape(-1);
        const double value = row.index({torch::logical_or(row.lt(0), row.gt(1))})[0].item<double>();
        throw FileError(
            fmt::format("{}: train.loss bce_with_logits needs targets in [0, 1]; sample {} has {} (use "
                        "train.loss: mse with train.task: regression for other targets)",
                        source, in_source(sample), value));
      }
    }
    // Float64 targets (CSV, npy) past float32's range became inf: "mse inf" and exit 0.
    if (labels.scalar_type() == torch::kDouble && labels.numel() > 0) {
      auto beyond = labels.abs().gt(std::numeric_limits<float>::max()).reshape({labels.size(0), -1}).any(1).nonzero();
      if (beyond.numel() > 0) {
        const int64_t sample = beyond[0][0].item<int64_t>();
        auto row = labels[sample].reshape(-1);
        const double value = row.index({row.abs().gt(std::numeric_limits<float>::max())})[0].item<double>();
        throw FileError(
            fmt::format("{}: the target of sample {} is {}, beyond float32's range (±3.4e38), in which "
                        "training computes (scale the targets, or fix that sample)",
                        source, in_source(sample), value));
      }
    }
    return labels.to(torch::kFloat);
  }
  // [N, 1] is how np.save writes a column (y.reshape(-1, 1), a DataFrame's values): one class per
  // sample all the same, so it is taken as [N] where PyTorch's CrossEntropyLoss would refuse it.
  torch::Tensor flat = labels.dim() == 2 && labels.size(1) == 1 ? labels.reshape({labels.size(0)}) : labels;
  if (flat.dim() != 1)
    throw FileError(source + ": train.loss cross_entropy needs one class per sample ([N] or [N, 1]); these labels are " +
                    std::string(c10::toString(labels.scalar_type())) + " " + shape(labels) +
                    " (use train.loss: bce_with_logits for several 0/1 targets per sample)");
  if (flat.scalar_type() == torch::kLong) return flat;
  // Before the conversion: inf, or 1e20, becomes INT64_MIN as an int64 and would be named a
  // negative label. 2^53: the largest whole number every float64 below it holds exactly.
  constexpr double kLargestClass = 9007199254740992.0;
  auto bad = torch::logical_or(torch::logical_not(torch::isfinite(flat)), flat.ne(flat.round()))
                 .logical_or_(flat.abs().gt(kLargestClass))
                 .nonzero();
  if (bad.numel() > 0) {
    const int64_t sample = bad[0][0].item<int64_t>();
    const double value = flat[sample].item<double>();
    std::string what = std::isnan(value) ? "NaN" : std::isinf(value) ? "infinite" : fmt::format("{}", value);
    if (std::isfinite(value) && std::abs(value) > kLargestClass) what += ", beyond any class count";
    throw FileError(source + ": train.loss cross_entropy needs one whole-number class per sample; label of sample " +
                    std::to_string(in_source(sample)) + " is " + what + " (these labels are " +
                    std::string(c10::toString(labels.scalar_type())) + " " + shape(labels) +
                    "; use train.loss: mse with train.task: regression for regression targets)");
  }
  return flat.to(torch::kLong);
}

void Loss::check_output(const torch::Tensor& output, const torch::Tensor& targets, int64_t max_class,
                        const std::string& max_class_source) const {
  if (classes()) {
    if (output.dim() != 2 || output.size(0) != targets.size(0) || output.size(1) <= max_class)
      throw UserError("the model's output is " + shape(output) + " for targets " + shape(targets) +
                      "; train.loss cross_entropy needs logits [" + std::to_string(targets.size(0)) + ", C] with C > " +
                      std::to_string(max_class) + ", the largest label (in " + max_class_source + ")");
    return;
  }
  if (output.size(0) != targets.size(0) || output.numel() != targets.numel())
    throw UserError("the model's output is " + shape(output) + " for targets " + shape(targets) + "; train.loss " +
                    config_.loss + " needs as many values per sample as the targets have");
}

torch::Tensor Loss::mean(const torch::Tensor& output, const torch::Tensor& targets) const {
  if (classes())
    return F::cross_entropy(output, targets, F::CrossEntropyFuncOptions().label_smoothing(config_.label_smoothing));
  if (config_.loss == "mse") return F::mse_loss(output.reshape_as(targets), targets);
  return F::binary_cross_entropy_with_logits(output.reshape_as(targets), targets);
}

std::vector<std::string> Loss::metric_names() const {
  if (config_.loss == "mse") return {"mse", "mae"};
  return {"loss", "accuracy"};
}

torch::Tensor Loss::metric_sums(const torch::Tensor& output, const torch::Tensor& targets) const {
  torch::Tensor first, second;
  if (classes()) {
    first = F::cross_entropy(output, targets,
                             F::CrossEntropyFuncOptions().reduction(torch::kSum).label_smoothing(config_.label_smoothing));
    second = output.argmax(1).eq(targets).sum();
  } else {
    auto out = output.reshape_as(targets);
    if (config_.loss == "mse") {
      auto error = out - targets;
      first = per_sample(error.square()).sum();
      second = per_sample(error.abs()).sum();
    } else {
      first = per_sample(F::binary_cross_entropy_with_logits(out, targets, F::BinaryCrossEntropyWithLogitsFuncOptions()
                                                                               .reduction(torch::kNone)))
                  .sum();
      second = per_sample(out.gt(0).eq(targets.gt(0.5)).to(torch::kFloat)).sum();
      ranked_.add(out, targets);  // Note [Exact AUC]
    }
  }
  return torch::stack({first.to(torch::kDouble), second.to(torch::kDouble)});
}

}  // namespace ddp
