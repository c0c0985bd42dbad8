#pragma once
// The tensor values the training thread reads to the host inside steps (aten::_local_scalar_dense:
// item(), a tensor used as a number or a bool; and copies from a device's memory into the host's).
// On a GPU each is a synchronisation that leaves the device idle while the host catches up, so a
// step should make none; the log steps' reads of the loss are outside the count. Ops on other
// threads (a CUDA backward's) are not seen. The observer
// watches kSampledSteps steps after the first only: every op pays for it while it is on, and a
// step's reads are a property of its code path, the same each step but the first, which sets up
// (pipeline stages read the shape headers of what they receive then, Note [Shapes between stages]).

#include <ATen/record_function.h>

#include <cstdint>

namespace ddp {

class HostReadCounter {
 public:
  static constexpr int64_t kSampledSteps = 20;

  HostReadCounter() = default;
  ~HostReadCounter();
  HostReadCounter(const HostReadCounter&) = delete;
  HostReadCounter& operator=(const HostReadCounter&) = delete;

  void step_begins();
  void step_ends();
  /// Reads per step over the steps counted so far (0 before any).
  double per_step() const;
  int64_t steps() const { return steps_; }

 private:
  at::CallbackHandle handle_ = 0;
  int64_t steps_ = 0, reads_ = 0;
  bool first_seen_ = false;
};

}  // namespace ddp
