#pragma once
// The GPT's weights in Hugging Face's GPT-2 layout (transformers' GPT2LMHeadModel), so that a run's
// model.safetensors and config.json are a directory from_pretrained reads, and model.init_from reads
// such a directory back.
//
// Note [GPT-2's layout]
// nanoGPT took GPT-2's names, so the two state dicts name the same tensors alike, but they differ in
// three ways, each of which loads silently wrong if ignored:
// - GPT-2's c_attn, c_proj and c_fc are Conv1D modules, whose weight is [in, out], the transpose of
//   a Linear's [out, in]. attn.c_proj is square, so a shape check would not catch an untransposed one.
// - GPT-2 always has biases; nanoGPT's model.bias false has none. Exported, they are zeros (the same
//   function); imported into a bias-free model, they must be zeros, or the file is refused.
// - lm_head is tied to wte and left out; the causal-mask buffers (attn.bias, attn.masked_bias) of older
//   files are ignored, as transformers does; and files of the base GPT2Model lack the "transformer."
//   prefix.
// The layout of a file is told by c_attn's shape, [C, 3C] in GPT-2's and [3C, C] in nanoGPT's (never
// equal), not by its name or where it came from.

#include <nlohmann/json_fwd.hpp>
#include <torch/types.h>

#include <string>
#include <utility>
#include <vector>

#include "ddp/model/state_dict_file.h"

namespace ddp {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

/// nanoGPT's state dict (python_state_dict of a Gpt) in GPT-2's layout.
NamedTensors gpt_to_gpt2_layout(const NamedTensors& nanogpt);

/// Whether `file`'s tensors are in GPT-2's layout (Note [GPT-2's layout]).
bool is_gpt2_layout(const StoredTensors& file);

/// GPT-2's layout back to nanoGPT's, for a model with or without biases; FileError naming `source`
/// and the tensor when a bias-free model would drop a bias that is not zero.
/// The weights are read when the result's are.
StoredTensors gpt_from_gpt2_layout(const StoredTensors& gpt2, bool bias, const std::string& source);

/// The GPT's config.json in transformers' GPT2Config names (plus "bias", which GPT2Config lacks).
nlohmann::json gpt2_config(int64_t n_layer, int64_t n_head, int64_t n_embd, int64_t block_size, int64_t vocab_size,
                           bool bias, double dropout, torch::ScalarType dtype);

}  // namespace ddp
