#pragma once
// nanoGPT's GPT, with its parameter names, so that model.pt loads with strict=True into a Python
// module of nanoGPT's structure: transformer.wte (token embedding), transformer.wpe (learned
// positions), transformer.h.N = pre-LayerNorm blocks of causal self-attention (attn.c_attn,
// attn.c_proj) and an exact-GELU MLP (mlp.c_fc, mlp.c_proj), transformer.ln_f, and lm_head, whose
// weight is the token embedding's (tied: one tensor under both names, as in nanoGPT's state_dict).
// See Note [Attention forms] in gpt.cpp for the causal mask and the `attn.bias` buffer.

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>

#include "ddp/model/model_config.h"
#include "ddp/model/model_registry.h"

namespace ddp {

class Gpt;

/// Whether this LibTorch has the fused scaled_dot_product_attention (2.x), which nanoGPT then uses.
bool gpt_fused_attention();

/// The GPT's shape: nanoGPT's GPTConfig.
struct GptOptions {
  int64_t n_layer = 0;  // no defaults of its own: model.* has them (gpt_options)
  int64_t n_head = 0;
  int64_t n_embd = 0;
  int64_t block_size = 0;
  int64_t vocab_size = 0;
  bool bias = true;
  double dropout = 0;
  /// The fused scaled_dot_product_attention (LibTorch 2.x only) or the explicit masked softmax, which
  /// keeps nanoGPT's attn.bias buffer (Note [Attention forms]). The default is what nanoGPT picks.
  bool fused_attention = gpt_fused_attention();
};

/// The options model.* gives; ConfigError naming the key when the heads do not divide the width.
GptOptions gpt_options(const ModelConfig& config);

class GptTransformer;
class RoutedLinear;

/// Tokens int64 [B, T] (T <= block_size) in, next-token logits [B, T, vocab_size] out.
class Gpt : public Model {
 public:
  /// A fresh model, initialised from the global RNG exactly as nanoGPT's GPT(config) is after
  /// torch.manual_seed: the same draws in the same order (see gpt.cpp).
  explicit Gpt(const GptOptions& options);

  std::vector<int64_t> input_shape() const override { return {}; }
  int64_t output_width() const override { return options_.vocab_size; }
  /// The embeddings, each block, then ln_f and the head: a stage boundary may fall before any block,
  /// and the embedding, tied to the head, stays with the root under dist.shard parameters.
  std::vector<ModelBlock> declare_blocks() override;
  /// model.pt (or any nanoGPT state_dict file), with or without the attn.bias mask buffers, which
  /// only one attention form keeps (Note [Attention forms]): a file from a LibTorch 2.x build loads
  /// on 1.13 and back. FileError as load_python_state_dict's.
  /// Also a file in GPT-2's layout (Note [GPT-2's layout]), as a Hugging Face directory holds it.
  void load_weights(const std::string& path) override;
  /// model.safetensors in GPT-2's layout, and config.json in its names: a directory from_pretrained reads.
  std::vector<std::pair<std::string, torch::Tensor>> hugging_face_state_dict() const override;
  void save_extras(const std::string& output_dir) const override;
  const GptOptions& options() const { return options_; }
  /// nanoGPT's sampling: the last block_size tokens through the whole model for each new one.
  std::unique_ptr<TokenStepper> token_stepper() override;

 private:
  GptOptions options_;
  std::shared_ptr<GptTransformer> transformer_;  // "transformer": wte, wpe, h, ln_f
  torch::Tensor head_weight_;                         // lm_head.weight, the same tensor as wte's
  std::shared_ptr<RoutedLinear> lm_head_;             // over head_weight_

  /// Tokens to the first block's input.
  torch::Tensor embed(const torch::Tensor& idx);
  /// The last block's output to logits.
  torch::Tensor head(const torch::Tensor& x);
};


}  // namespace ddp
