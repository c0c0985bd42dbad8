#pragma once
// Megatron-LM's tensor-parallel arithmetic (arXiv 1909.08053), as autograd functions over a tensor
// group: the pieces a tensor-parallel pass splits a transformer's layers with. Note [Tensor regions].
//
// A column-parallel Linear holds a slice of the output features (rows of its weight [out, in]) and
// takes the whole input: its input enters the region through copy_to_tensor_region (identity
// forward, all-reduce of the input's gradient backward). A row-parallel Linear holds the matching
// slice of the input features (columns of its weight) and leaves the region through
// reduce_from_tensor_region (all-reduce forward, identity backward), its bias added once after the
// sum. An MLP or an attention block so costs two all-reduces forward and two backward. A
// vocabulary-parallel embedding holds a slice of the rows and sums the slices' lookups; the
// loss-parallel cross-entropy takes the logits' vocabulary slices and never gathers them whole.

#include <torch/types.h>

#include "ddp/comm/process_group.h"

namespace ddp {

// Each function keeps `group` by address for its backward: the group must outlive the graph (the
// plan's groups live for the whole run).

/// Identity forward; the gradient summed over `group` backward (a column-parallel layer's input).
torch::Tensor copy_to_tensor_region(const torch::Tensor& x, const Communicator& group);

/// Summed over `group` forward; identity backward (a row-parallel layer's output).
torch::Tensor reduce_from_tensor_region(const torch::Tensor& x, const Communicator& group);

// Sequence parallelism (arXiv 2205.05198): between the tensor regions the activations [B, S, ...]
// are split along the sequence (dimension 1), rank r holding positions [r·S/T, (r+1)·S/T); a
// region's entry all-gathers them and its exit reduce-scatters, the same bytes as one all-reduce.

/// [B, S/T, ...] this rank's part of the sequence → [B, S, ...] every rank's, in rank order;
/// backward: the gradient summed over the group and this rank's part kept (reduce-scatter).
torch::Tensor gather_from_sequence_region(const torch::Tensor& x, const Communicator& group);

/// [B, S, ...] this rank's partial sums → [B, S/T, ...] its part of their sum over the group
/// (reduce-scatter); backward: all-gather.
torch::Tensor reduce_scatter_to_sequence_region(const torch::Tensor& x, const Communicator& group);

/// [B, S, ...] the same on every rank → [B, S/T, ...] this rank's part; backward: all-gather.
torch::Tensor split_to_sequence_region(const torch::Tensor& x, const Communicator& group);

/// Slice `rank` of `parts` along `dim` of a whole tensor (a layer's weight before it is split).
torch::Tensor tensor_slice(const torch::Tensor& whole, int64_t dim, int rank, int parts);

/// x · Wᵀ + b with W [out/T, in] and b [out/T] this rank's rows: this rank's slice of the output.
/// `sequence_parallel`: x is this rank's part of the sequence, gathered first.
torch::Tensor column_parallel_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                     const Communicator& group, bool sequence_parallel = false);

/// Σ over the group of x_slice · W_sliceᵀ, then + b: W [out, in/T] this rank's columns, `x_slice`
/// its slice of the input features (a column-parallel layer's output), `bias` whole (or undefined).
/// `sequence_parallel`: the sum is reduce-scattered, each rank keeping its part of the sequence.
torch::Tensor row_parallel_linear(const torch::Tensor& x_slice, const torch::Tensor& weight, const torch::Tensor& bias,
                                  const Communicator& group, bool sequence_parallel = false);

/// Rows `ids` of a table whose rows [first, first + weight.size(0)) this rank holds: each rank
/// looks up the ids in its slice (zeros elsewhere) and the slices are summed.
torch::Tensor vocab_parallel_embedding(const torch::Tensor& ids, const torch::Tensor& weight, int64_t first,
                                       const Communicator& group);

/// Per-token cross-entropy of `logits` [N, V/T], this rank's vocabulary slice [first, first + V/T),
/// against `targets` [N] (indices in the whole vocabulary): the max and the sum of exponentials are
/// reduced over the group, and so is the target's logit; the logits are never gathered. Returns [N],
/// the same on every rank; its gradient reaches this rank's slice of the logits only. Every target
/// counts (no ignore index). `label_smoothing` as torch's cross_entropy's.
torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets, int64_t first,
                                           const Communicator& group, double label_smoothing = 0);

}  // namespace ddp
