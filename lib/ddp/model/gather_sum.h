#pragma once
// Σ_{e: dst[e] = d} x[src[e]] for every d, without the [E, F] tensor of messages that
// x.index_select(0, src) followed by index_add_ would build (and keep for backward).

#include <torch/types.h>

#include <utility>

namespace ddp {

/// [num_dst, F] sums of the rows of `x` [N, F] along the edges src → dst (int64 [E] each), and a
/// copy of x's first num_dst rows (a block's output nodes are a prefix of its inputs); differentiable
/// in x, whose gradient is then one [N, F] tensor rather than one per use. The same sums, term for
/// term in edge order, as index_select + index_add_.
std::pair<torch::Tensor, torch::Tensor> gather_sum(const torch::Tensor& x, const torch::Tensor& src,
                                                   const torch::Tensor& dst, int64_t num_dst);

}  // namespace ddp
