#pragma once
// Memory for whole units in a sharded run (stage 3's gathered parameters, the whole gradients while
// they accumulate), which come and go several times a step. See Note [Unit memory].

#include <torch/types.h>

#include <cstddef>
#include <memory>

namespace ddp {

/// Blocks for whole units: on the CPU mapped from the kernel, and the freed ones kept for reuse up
/// to a limit; elsewhere (CUDA) the device's own caching allocator.
class UnitMemory {
 public:
  /// Keeps up to `keep_bytes` of freed CPU blocks for reuse.
  explicit UnitMemory(std::size_t keep_bytes);
  ~UnitMemory();
  UnitMemory(const UnitMemory&) = delete;
  UnitMemory& operator=(const UnitMemory&) = delete;

  /// Gives the StorageImpl of `t` memory for its elements again (contents undefined); with keep
  /// false, that memory goes back to the kernel when it is freed rather than being kept for reuse.
  void fill_storage(const torch::Tensor& t, bool keep = true);
  /// Takes that memory back (the StorageImpl stays, holding nothing: Note [Unit hooks]).
  static void empty_storage(const torch::Tensor& t);
  /// A zeroed 1-D tensor of `numel` elements; with keep false, its memory goes back to the kernel
  /// when it is freed rather than being kept for reuse.
  torch::Tensor zeros(int64_t numel, const torch::TensorOptions& options, bool keep = true);

  struct Pool;  // public for the blocks' deleters; defined in the .cpp

 private:
  std::shared_ptr<Pool> pool_;  // shared with the blocks' deleters, which may outlive this
};

}  // namespace ddp
