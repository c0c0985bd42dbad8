#pragma once
// Activation checkpointing (model.activation_checkpointing), a pass on the model's blocks (Note
// [Activation checkpointing]).

#include <string>
#include <vector>

#include "ddp/model/model_registry.h"

namespace ddp {

// Note [Activation checkpointing]: a checkpointed block keeps only its input through forward; its
// backward runs its forward again, with gradients on, and differentiates that. Memory for
// activations falls from every block's to one block's plus the blocks' inputs, for one more forward
// of those blocks. It is the first pass (Note [Passes]): it replaces the forward of the blocks it
// checkpoints, and pipeline stages and dist.shard parameters then cut and wrap those blocks as any
// others (a sharded block's parameters are gathered again for backward before the recomputation
// needs them). The recomputation repeats the forward exactly: the random generators' states (the
// CPU's and the block's device's, for dropout) and autocast's are those the forward ran under. As torch.utils.checkpoint(use_reentrant=
// False), the block's parameters are inputs of the checkpoint, so they get gradients even when the
// block's input has none (the token embedding). A block that updates buffers as it runs (BatchNorm)
// updates them twice, as under PyTorch's checkpointing.

/// Applies model.activation_checkpointing `mode` (none, full: every block, every_N: blocks 0, N, 2N,
/// ... of the model's list) to `model`'s blocks; ConfigError when the model has none. Once per
/// model, before any other pass. Returns the names of the blocks it checkpoints.
std::vector<std::string> checkpoint_activations(Model& model, const std::string& mode);

}  // namespace ddp
