#pragma once
// An operator-level profile of chosen training steps, for finding where a step's time goes:
// DDPRUN_PROFILE=FIRST:COUNT records steps FIRST..FIRST+COUNT-1 with LibTorch's profiler and writes
// each rank's trace, in Chrome's trace format, to OUTPUT_DIR/profile_rank<R>.trace.json when the
// last of them ends (scripts/profile_summary.py sums it by operator). Unset, it costs nothing. It
// records the host's side: on a GPU, kernel launches, not the kernels' time.

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
  StepProfiler(const std::string& output_dir, int rank);
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
};

}  // namespace ddp
