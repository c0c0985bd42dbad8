#include "ddp/data/normalizer.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace ddp {
namespace {

constexpr int64_t kChunk = 4096;  // samples per pass when reading the statistics from a file

// Sum and sum of squares of the features over the samples, in float64, per feature position.
std::pair<torch::Tensor, torch::Tensor> feature_moments(const Dataset& data) {
  torch::Tensor sum, squares;
  for (int64_t start = 0; start < data.size(); start += kChunk) {
    auto rows = torch::arange(start, std::min(data.size(), start + kChunk), torch::kLong);
    auto x = data.select(rows).to(torch::kDouble);
    auto s = x.sum(0), q = x.square().sum(0);
    sum = sum.defined() ? sum.add_(s) : s;
    squares = squares.defined() ? squares.add_(q) : q;
  }
  return {sum, squares};
}

}  // namespace

torch::Tensor Normalizer::apply(const torch::Tensor& stored) const {
  if (as_stored) return stored;
  auto x = stored.to(torch::kFloat);
  if (divisor != 1) x.div_(divisor);
  if (mean_per_feature.defined()) return x.sub_(mean_per_feature).div_(std_per_feature);
  return x.sub_(mean).div_(std);
}

Normalizer make_normalizer(const DataConfig& config, const Dataset& train) {
  Normalizer normalizer;
  const std::string kind = normalization_kind(config);
  normalizer.kind = kind;
  if (kind == "as_stored") {
    normalizer.as_stored = true;
    return normalizer;
  }
  if (kind == "none") return normalizer;
  if (kind == "fixed") {
    normalizer.divisor = train.feature_dtype() == torch::kUInt8 ? 255.0 : 1.0;
    normalizer.mean = config.mean;
    normalizer.std = config.std;
    return normalizer;
  }
  auto [sum, squares] = feature_moments(train);
  double n = static_cast<double>(std::max<int64_t>(train.size(), 1));
  if (kind == "global") {
    double values = n * static_cast<double>(std::max<int64_t>(sum.numel(), 1));
    double mean = sum.sum().item<double>() / values;
    double variance = std::max(0.0, squares.sum().item<double>() / values - mean * mean);
    normalizer.mean = mean;
    normalizer.std = variance > 0 ? std::sqrt(variance) : 1.0;
    return normalizer;
  }
  auto mean = sum / n;
  auto std = (squares / n - mean.square()).clamp_min(0).sqrt();
  normalizer.mean_per_feature = mean.to(torch::kFloat);
  normalizer.std_per_feature = torch::where(std > 0, std, torch::ones_like(std)).to(torch::kFloat);
  return normalizer;
}

namespace {

// A key a line, each value (a list too) on its key's line.
std::string one_key_a_line(const nlohmann::ordered_json& json) {
  std::string text = "{";
  for (auto it = json.begin(); it != json.end(); ++it)
    text += (it == json.begin() ? "\n " : ",\n ") + nlohmann::json(it.key()).dump() + ": " + it.value().dump();
  return text + "\n}\n";
}

}  // namespace

std::string normalization_json(const Normalizer& normalizer) {
  nlohmann::ordered_json json;
  json["normalize"] = normalizer.kind;
  if (normalizer.as_stored || normalizer.kind == "none") {
    json["inputs"] = normalizer.as_stored ? "the features as stored" : "the features as float32";
    return one_key_a_line(json);
  }
  json["inputs"] = "(x / divide_by - mean) / std, in float32";
  json["divide_by"] = normalizer.divisor;
  if (!normalizer.mean_per_feature.defined()) {
    json["mean"] = normalizer.mean;
    json["std"] = normalizer.std;
    return one_key_a_line(json);
  }
  auto values = [](const torch::Tensor& t) {
    auto flat = t.to(torch::kDouble).contiguous().view(-1);
    return std::vector<double>(flat.data_ptr<double>(), flat.data_ptr<double>() + flat.numel());
  };
  json["shape"] = normalizer.mean_per_feature.sizes().vec();
  json["mean"] = values(normalizer.mean_per_feature);
  json["std"] = values(normalizer.std_per_feature);
  return one_key_a_line(json);
}

}  // namespace ddp
