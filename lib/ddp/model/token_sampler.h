#pragma once
// Text from a trained language model: nanoGPT's sampling loop (scale the last position's logits by
// the temperature, keep the top k, draw from the softmax), over any model's TokenStepper.

#include <cstdint>
#include <functional>
#include <vector>

#include "ddp/model/model_registry.h"

namespace ddp {

/// How tokens are drawn.
struct SamplingOptions {
  int64_t tokens = 256;      ///< new tokens to draw
  double temperature = 0.8;  ///< < 1 sharper, > 1 flatter; 0: always the most likely token
  int64_t top_k = 200;       ///< draw among the k most likely; 0: among all
  uint64_t seed = 1337;      ///< the same seed, model and prompt give the same text
  /// Ids at or above this are never drawn: a tokenizer of fewer pieces than the model's vocabulary
  /// (padded to a multiple, say) has no text for them. 0: every id may be.
  int64_t id_limit = 0;
};

/// Draws `options.tokens` tokens after `prompt` (ids < the model's output_width(), at least one),
/// calling `emit` with each as it is drawn, and returns them. The model is put in eval mode.
/// UserError for an empty prompt, an id outside the vocabulary, or a model that cannot be sampled.
std::vector<int64_t> sample_tokens(Model& model, const std::vector<int64_t>& prompt, const SamplingOptions& options,
                                   const std::function<void(int64_t)>& emit = {});

}  // namespace ddp
