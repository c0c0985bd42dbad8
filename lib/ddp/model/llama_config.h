#pragma once
// The llama family's model.* keys (llama.cpp declares them and builds the model): the shape of a
// Llama-family decoder (Llama 2 and 3, and those that share it), as Hugging Face's LlamaConfig has it.
// Its context is model.block_size, which rotary positions do not bound.

#include <cstdint>
#include <string>

namespace ddp {

class ConfigSchema;

/// A Llama-family decoder, as model.* shapes it.
struct LlamaConfig {
  int64_t n_layer = 12;            ///< decoder layers (HF num_hidden_layers)
  int64_t n_head = 12;             ///< query heads (num_attention_heads); model.dim divides by it
  int64_t n_kv_heads = 0;          ///< key/value heads (num_key_value_heads); 0: n_head, multi-head
  int64_t dim = 768;               ///< the residual stream's width (hidden_size)
  int64_t ffn_dim = 0;             ///< the MLP's width (intermediate_size); 0: Llama's rule from dim
  int64_t multiple_of = 256;       ///< Llama's rule: the width rounded up to a multiple of this
  double ffn_dim_multiplier = 0;   ///< Llama's rule: scales 8·dim/3 first (0: 1)
  double rope_theta = 10000;       ///< rotary base (rope_theta; Llama 3: 500000)
  std::string rope_scaling = "none";  ///< none | llama3 (Llama 3.1's rope_scaling of rope_type llama3)
  double rope_factor = 8;             ///< llama3: factor
  double rope_low_freq_factor = 1;    ///< llama3: low_freq_factor
  double rope_high_freq_factor = 4;   ///< llama3: high_freq_factor
  int64_t rope_original_context = 8192;  ///< llama3: original_max_position_embeddings
  double norm_eps = 1e-5;          ///< RMSNorm's epsilon (rms_norm_eps)
  int64_t vocab_size = 50304;      ///< token ids 0..vocab_size-1
  bool tie_embeddings = false;     ///< lm_head shares the token embedding (tie_word_embeddings)
};

/// The MLP's width `config` gives: ffn_dim, or Llama's rule (8·dim/3, times ffn_dim_multiplier,
/// rounded up to a multiple of multiple_of).
int64_t llama_ffn_dim(const LlamaConfig& config);

/// Declares the llama keys, bound to `config`; their rules apply when `model_name` (model.name's
/// value, read when the rules run) is llama.
void declare_config(ConfigSchema& schema, LlamaConfig& config, const std::string& model_name);

}  // namespace ddp
