#pragma once
// Where the parameters live on one rank, as DTensor's placements say it for the layouts ddprun
// has: each piece this rank holds of a parameter (a run of its flattened elements, or all of it),
// which of its copies sums count, and which groups split the parameters between them. The
// clipping norm, the agreement of a weight's copies (tied across stages) and what a checkpoint
// saves are worked out from them alone, whichever passes made the layout (Note [Placements]).

#include <torch/torch.h>

#include <vector>

#include "ddp/comm/process_group.h"
#include "ddp/parallel/owned_range.h"

namespace ddp {

/// One piece of a parameter on this rank.
struct PlacedPiece {
  OwnedRange range;  ///< range.parameter: the index in the plan's list
  /// Whether sums over the splitting groups count this copy: false where another rank of them
  /// holds the same elements and counts them (a weight tied across stages, at its later stages).
  bool counted = true;
  /// The ranks holding a copy of this piece that must stay equal to it (a weight tied across
  /// stages; group rank 0 is the first stage, whose copy counts); null: none.
  const Communicator* copies = nullptr;
};

/// This rank's pieces of the parameters.
struct Placements {
  /// The pieces whose values and averaged gradients this rank holds after the gradient sync.
  std::vector<PlacedPiece> held;
  /// The pieces whose optimizer state this rank keeps (fewer than held under ZeRO-1).
  std::vector<PlacedPiece> kept;
  /// The groups between which the held pieces are split, innermost first: a sum over the whole
  /// parameters is the counted pieces' sums reduced over each. Empty: this rank holds every parameter.
  std::vector<const Communicator*> split;
};

/// Scales the held gradients so that the norm of the whole gradient, over every piece on every
/// rank, is at most `max_norm`, with torch.nn.utils.clip_grad_norm_'s coefficient.
void clip_grad_norm(const Placements& placements, double max_norm);
/// Each held gradient with copies summed over them, as the gradient of one shared tensor would be.
void sum_copied_gradients(const Placements& placements);
/// Each held piece with copies, its values and its optimizer state, as its first copy has them
/// (after a restore that wrote the first copy alone).
void share_copied_pieces(const Placements& placements, torch::optim::Optimizer& optimizer);
/// What this rank saves in a sharded checkpoint, and restores: the kept pieces whose copy counts,
/// after those (`*restored_only` of them) that are the same on every rank of a group without being
/// copies (replicated over a tensor group): each rank restores them, another writes them.
std::vector<OwnedRange> saved_ranges(const Placements& placements, std::size_t* restored_only = nullptr);

}  // namespace ddp
