#pragma once
// model.init_from is read by every rank from its own node (Note [Deferred initialisation]): the
// ranks must agree that they read the same weights.

#include <string>

#include "ddp/comm/process_group.h"

namespace ddp {

/// Compares model.init_from at `path` on every rank of `world` with rank 0's (weights_fingerprint).
/// Every rank calls it. FileError where this rank cannot read it; UserError on the others, naming
/// the ranks whose copy differs from rank 0's.
void check_same_weights(const Communicator& world, const std::string& path);

}  // namespace ddp
