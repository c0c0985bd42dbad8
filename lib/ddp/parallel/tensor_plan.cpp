#include "ddp/parallel/tensor_plan.h"

#include <algorithm>

#include "ddp/common/error.h"
#include "ddp/common/text.h"

namespace ddp {
namespace {

std::string trimmed(const std::string& text) {
  const auto first = text.find_first_not_of(" \t"), last = text.find_last_not_of(" \t");
  return first == std::string::npos ? "" : text.substr(first, last - first + 1);
}

}  // namespace

std::vector<TensorPlanEntry> builtin_tensor_plan(const ModelConfig& model, int64_t tensor) {
  const std::string t = std::to_string(tensor);
  if (model.name != "gpt" && model.name != "llama")
    throw ConfigError("dist.tensor " + t + ": model.name " + model.name +
                      (model.name == "torchscript"
                           ? " has no built-in tensor-parallel plan (gpt and llama have): give one in dist.tensor_plan, "
                             "or use dist.tensor: 1"
                           : " cannot be split over ranks: tensor parallelism splits the gpt's, the llama's and "
                             "TorchScript modules' layers (dist.tensor_plan); use dist.tensor: 1"));
  const bool llama = model.name == "llama";
  auto divides = [&](const std::string& key, int64_t value, const std::string& why) {
    if (value % tensor != 0)
      throw ConfigError("dist.tensor " + t + ": " + key + " " + std::to_string(value) + " must divide by it (" + why + ")");
  };
  divides("model.n_head", llama ? model.llama.n_head : model.gpt.n_head, "each rank computes whole heads");
  if (llama && model.llama.n_kv_heads > 0)
    divides("model.n_kv_heads", model.llama.n_kv_heads, "each rank holds whole key/value heads, those of its query heads");
  divides("model.vocab_size", llama ? model.llama.vocab_size : model.gpt.vocab_size,
          "each rank holds a slice of the vocabulary; pad it, as nanoGPT's 50304");
  if (llama)  // torchtitan's plan for Llama
    return {{"model.embed_tokens", "rowwise"},
            {"model.layers.*.self_attn.q_proj", "colwise"},
            {"model.layers.*.self_attn.k_proj", "colwise"},
            {"model.layers.*.self_attn.v_proj", "colwise"},
            {"model.layers.*.self_attn.o_proj", "rowwise"},
            {"model.layers.*.mlp.gate_proj", "colwise"},
            {"model.layers.*.mlp.up_proj", "colwise"},
            {"model.layers.*.mlp.down_proj", "rowwise"},
            {"lm_head", "colwise", /*output=*/true}};
  return {{"transformer.wte", "rowwise"},
          {"transformer.h.*.attn.c_attn", "colwise"},
          {"transformer.h.*.attn.c_proj", "rowwise"},
          {"transformer.h.*.mlp.c_fc", "colwise"},
          {"transformer.h.*.mlp.c_proj", "rowwise"},
          {"lm_head", "colwise", /*output=*/true}};
}

std::vector<TensorPlanEntry> parse_tensor_plan(const std::string& text) {
  static const std::vector<std::string> kStyles = {"colwise", "rowwise", "replicate"};
  std::vector<TensorPlanEntry> plan;
  for (const std::string& piece : split(text, ',')) {
    const std::string entry = trimmed(piece);
    const auto equals = entry.find('=');
    if (equals == std::string::npos || trimmed(entry.substr(0, equals)).empty())
      throw ConfigError("dist.tensor_plan: '" + entry + "' is not PATH=STYLE (a submodule's path, * for a layer's "
                        "index, = colwise, rowwise or replicate), as in layers.*.attn.q=colwise");
    TensorPlanEntry parsed{trimmed(entry.substr(0, equals)), trimmed(entry.substr(equals + 1))};
    parsed.output = parsed.path == "lm_head" && parsed.style == "colwise";  // the logits, split by vocabulary
    if (std::find(kStyles.begin(), kStyles.end(), parsed.style) == kStyles.end()) {
      auto suggestion = nearest(parsed.style, kStyles);
      throw ConfigError("dist.tensor_plan: " + parsed.path + "'s style '" + parsed.style +
                        "' is not colwise, rowwise or replicate" +
                        (suggestion ? " (did you mean " + *suggestion + "?)" : ""));
    }
    for (const TensorPlanEntry& earlier : plan)
      if (earlier.path == parsed.path)
        throw ConfigError("dist.tensor_plan: " + parsed.path + " is given twice");
    plan.push_back(std::move(parsed));
  }
  return plan;
}

std::vector<TensorPlanEntry> tensor_plan(const ModelConfig& model, const MeshConfig& mesh) {
  return mesh.tensor_plan.empty() ? builtin_tensor_plan(model, mesh.tensor) : parse_tensor_plan(mesh.tensor_plan);
}

}  // namespace ddp
