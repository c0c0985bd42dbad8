#pragma once
// An operator-level profile of chosen training steps, for finding where a step's time goes:
// DDPRUN_PROFILE=FIRST:COUNT records steps FIRST..FIRST+COUNT-1 with LibTorch's profiler and writes
// each rank's trace, in Chrome's trace format, to OUTPUT_DIR/profile_rank<R>.trace.json when the
// last of them ends (scripts/profile_summary.py sums it by operator, and by kernel). Unset, it costs
// nothing. On a GPU, where LibTorch has Kineto (CUDA builds of 2.x do), it records the GPU's kernels
// and copies beside the host's operators, as torch.profiler does; otherwise the host's side only (on
// a GPU: kernel launches, not the kernels' time).

#include <torch/types.h>

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>

namespace torch::autograd::profiler {
struct RecordProfile;
}

namespace ddp {

/// The steps DDPRUN_PROFILE asks for, recorded around the loop's steps.
class StepProfiler {
 public:
  /// Reads DDPRUN_PROFILE; UserError naming it when it is not FIRST:COUNT with COUNT >= 1.
  StepProfiler(const std::string& output_dir, int rank, const torch::Device& device);
  ~StepProfiler();
  /// Starts recording when `step` (the optimizer step about to run, 0-based) is the first asked for.
  void step_begins(int64_t step);
  /// Writes the trace when `step` (the one that just ran) was the last asked for.
  void step_ends(int64_t step);

 private:
  std::string path_;
  int64_t first_ = -1, last_ = -1;
  std::unique_ptr<std::ofstream> file_;
  std::unique_ptr<torch::autograd::profiler::RecordProfile> recording_;  // destroyed first: it writes into file_
  void save_kineto_trace();

  bool kineto_ = false;  ///< the GPU's side too, through Kineto
  int64_t device_index_ = -1;
  bool kineto_recording_ = false;
};

}  // namespace ddp
