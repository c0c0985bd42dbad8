#include "ddp/parallel/placements.h"

#include "ddp/comm/collectives.h"
#include "ddp/parallel/optimizer_state.h"

namespace ddp {

// Note [Placements]
// Each pass says what it does to the pieces a rank holds, and nothing about the other passes: a
// pipeline split keeps the stage's parameters, counts a weight tied across stages at its first
// stage only, gives its copies a group and splits over the pipeline group; ZeRO-2/3 cut each held
// parameter into runs of its flattened elements and split over the data-shard group; ZeRO-1 keeps
// the optimizer state of a share of the held pieces. The plan composes them in the passes' order,
// and everything that needs to know where a parameter's elements are reads the result:
// - the clipping norm sums the counted pieces' squared gradients and reduces the sum over each
//   splitting group, so every element of every parameter counts once on the whole mesh;
// - a piece with copies sums its gradient over them after the sync, and after a restore takes its
//   values and state from the first copy, which alone was saved;
// - a checkpoint saves the kept pieces that count; replicas skip writing by the layout's rule.
// Tensor parallelism adds its kind of piece and its splitting group: a column or row slice (or a run
// of one, cut by ZeRO) is boxes of the whole parameter, counted on every rank of the tensor group;
// what it replicates counts at the group's rank 0 and is restored by every rank (Note [Tensor
// parallelism]). None of these needed a branch for it.

void clip_grad_norm(const Placements& placements, double max_norm) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  for (const auto& piece : placements.held)
    if (piece.range.stepped.grad().defined()) grads.push_back(piece.range.stepped.grad());
  if (placements.split.empty()) {
    // torch::nn::utils::clip_grad_norm_'s arithmetic, without its closing item(): that read would
    // wait for the GPU to finish before the optimizer's kernels are even queued.
    if (grads.empty()) return;
    std::vector<torch::Tensor> norms;
    for (const auto& g : grads) norms.push_back(g.norm(2));
    auto total = norms.size() == 1 ? norms[0] : torch::stack(norms).norm(2);
    auto coefficient = torch::clamp(max_norm / (total + 1e-6), c10::nullopt, 1.0);
    for (auto& g : grads) g.mul_(coefficient);
    return;
  }
  // Split: every rank takes part in the reductions, whatever it holds. On the pieces' device and
  // never read back, so a GPU is not waited for before the optimizer's step.
  auto options = torch::TensorOptions().dtype(torch::kDouble);
  if (!placements.held.empty()) options = options.device(placements.held.front().range.stepped.device());
  auto squares = torch::zeros({1}, options);
  for (const auto& piece : placements.held) {
    const auto& grad = piece.range.stepped.grad();
    if (piece.counted && grad.defined()) squares += grad.to(torch::kDouble).pow(2).sum();
  }
  for (const Communicator* group : placements.split) squares = all_reduce_sum(*group, squares);
  // A 0-dim factor multiplies in the gradients' own precision, as a number would.
  auto coefficient = torch::clamp(max_norm / (squares.sqrt() + 1e-6), c10::nullopt, 1.0).reshape({});
  for (auto& g : grads) g.mul_(coefficient);
}

void sum_copied_gradients(const Placements& placements) {
  torch::NoGradGuard no_grad;
  for (const auto& piece : placements.held) {
    if (!piece.copies) continue;
    torch::Tensor stepped = piece.range.stepped;
    auto grad = stepped.grad();
    if (!grad.defined()) stepped.mutable_grad() = grad = torch::zeros_like(stepped);  // unused here this step
    grad.copy_(all_reduce_sum(*piece.copies, grad.to(torch::kDouble)).to(grad.scalar_type()));
  }
}

void share_copied_pieces(const Placements& placements, torch::optim::Optimizer& optimizer) {
  torch::NoGradGuard no_grad;
  for (const auto& piece : placements.held) {
    if (!piece.copies) continue;
    StateTensors state = read_state(optimizer, piece.range.stepped);
    std::vector<torch::Tensor> flat{piece.range.value, state.step};
    for (auto& slot : state.slots) flat.push_back(slot);
    broadcast_coalesced(*piece.copies, flat, 0);  // group rank 0: the first copy
    write_state(optimizer, piece.range.stepped, state);
  }
}

std::vector<OwnedRange> saved_ranges(const Placements& placements, std::size_t* restored_only) {
  std::vector<OwnedRange> ranges;
  for (const auto& piece : placements.kept)
    if (!piece.counted && !piece.copies) ranges.push_back(piece.range);
  if (restored_only) *restored_only = ranges.size();
  else ranges.clear();
  for (const auto& piece : placements.kept)
    if (piece.counted) ranges.push_back(piece.range);
  return ranges;
}

}  // namespace ddp
