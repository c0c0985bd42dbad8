#pragma once
// Tensors whose memory is a file: for what one rank must hold whole only to write it out (every
// sharded table, gathered for model.pt), and may not fit in its memory.

#include <torch/types.h>

#include <string>

namespace ddp {

/// An uninitialised contiguous CPU tensor whose memory is a shared mapping of an unlinked file in
/// `dir`: its pages live in the page cache and go back to disk under pressure, never in the heap
/// (nor under a ulimit -d, RLIMIT_DATA); the file goes with the last reference. Its blocks are
/// reserved first, so a full disk is an IoError here, never a SIGBUS on a later write.
torch::Tensor file_backed_empty(at::IntArrayRef sizes, torch::ScalarType dtype, const std::string& dir);

}  // namespace ddp
