#pragma once
// The gpt family's model.* keys (gpt.cpp declares them and builds the model): nanoGPT's GPTConfig,
// its context being model.block_size.

#include <cstdint>
#include <string>

namespace ddp {

class ConfigSchema;

/// nanoGPT's GPT, as model.* shapes it.
struct GptConfig {
  int64_t n_layer = 12;        ///< transformer blocks
  int64_t n_head = 12;         ///< attention heads per block (n_embd divisible by it)
  int64_t n_embd = 768;        ///< width
  int64_t vocab_size = 50304;  ///< token ids 0..vocab_size-1 (256 for byte-level text)
  bool bias = true;            ///< biases in the Linears and LayerNorms
  double dropout = 0;          ///< nanoGPT's dropouts
};

/// Declares the gpt keys, bound to `config`; their rules apply when `model_name` (model.name's
/// value, read when the rules run) is gpt.
void declare_config(ConfigSchema& schema, GptConfig& config, const std::string& model_name);

}  // namespace ddp
