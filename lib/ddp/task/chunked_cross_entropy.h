#pragma once
// The head and the cross-entropy in one, a chunk of tokens at a time (Note [Chunked cross-entropy]).

#include <torch/types.h>

#include <cstdint>

namespace ddp {

/// Per-token cross-entropy of the logits `hidden` [N, C] · `weight` [V, C]ᵀ (+ `bias` [V], undefined:
/// none) against `targets` [N], with label smoothing as torch's: float32 [N]. Never holds more than
/// `chunk_tokens` × V logits: each chunk's are made, reduced and dropped, and made again in backward.
torch::Tensor chunked_cross_entropy(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& bias,
                                    const torch::Tensor& targets, double label_smoothing, int64_t chunk_tokens);

/// The tokens a chunk takes so that its float32 logits over `vocabulary` stay about 32 MiB.
int64_t loss_chunk_tokens(int64_t vocabulary);

}  // namespace ddp
