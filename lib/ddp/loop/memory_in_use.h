#pragma once
// Memory in use where a rank computes, for what a step's activations hold.

#include <torch/types.h>

#include <cstdint>

namespace ddp {

/// Bytes in use on `device`: on a GPU, what the caching allocator has handed out (not what it
/// reserved); on the CPU, glibc's main arena (where the rank's thread allocates) and every mmapped
/// block: of the whole process, so ranks as threads see each other's.
int64_t memory_in_use(const torch::Device& device);

/// On a GPU, the most the caching allocator has had handed out at once since the process began
/// (torch.cuda.max_memory_allocated); -1 elsewhere, where peak RSS tells.
int64_t peak_memory_in_use(const torch::Device& device);

}  // namespace ddp
