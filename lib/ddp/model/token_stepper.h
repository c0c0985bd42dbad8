#pragma once
// A causal language model read one token at a time, which is how it is sampled from: the GPT
// recomputes its window each time, as nanoGPT does; the Llama keeps each layer's keys and values
// (a KV cache), so that each new token costs one position's work.

#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace ddp {

/// Feeds a model a sequence piece by piece.
class TokenStepper {
 public:
  virtual ~TokenStepper() = default;
  /// Takes the tokens that follow those fed before (the prompt first, then each drawn one) and
  /// returns the logits of the next token, float [vocab_size].
  virtual torch::Tensor feed(const std::vector<int64_t>& tokens) = 0;
};

class Model;

/// nanoGPT's way for any model taking int64 [1, T] and giving [1, T, vocab]: the last
/// `block_size` tokens through the whole model each time.
class WindowStepper : public TokenStepper {
 public:
  WindowStepper(Model& model, int64_t block_size) : model_(model), block_size_(block_size) {}
  torch::Tensor feed(const std::vector<int64_t>& tokens) override;

 private:
  Model& model_;
  int64_t block_size_;
  std::vector<int64_t> context_;
};

}  // namespace ddp
