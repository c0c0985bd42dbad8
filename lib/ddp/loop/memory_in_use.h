#pragma once
// Memory in use where a rank computes, for what a step's activations hold.

#include <torch/types.h>

#include <cstdint>

namespace ddp {

/// Bytes in use on `device`: on a GPU, what the caching allocator has handed out (not what it
/// reserved); on the CPU, glibc's main arena (where the rank's thread allocates) and every mmapped
/// block: of the whole process, so ranks as threads see each other's.
int64_t memory_in_use(const torch::Device& device);

}  // namespace ddp
