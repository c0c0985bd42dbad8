#include "ddp/loop/step_profiler.h"

#include <spdlog/spdlog.h>
#include <torch/csrc/autograd/profiler_legacy.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "ddp/common/error.h"

namespace ddp {

StepProfiler::StepProfiler(const std::string& output_dir, int rank) {
  const char* value = std::getenv("DDPRUN_PROFILE");
  if (!value || !*value) return;
  long long first = -1, count = 0;
  char extra = 0;
  if (std::sscanf(value, "%lld:%lld%c", &first, &count, &extra) != 2 || first < 0 || count < 1)
    throw UserError(std::string("DDPRUN_PROFILE: expected FIRST:COUNT (steps, COUNT >= 1), got '") + value + "'");
  first_ = first;
  last_ = first + count - 1;
  path_ = output_dir + "/profile_rank" + std::to_string(rank) + ".trace.json";
}

StepProfiler::~StepProfiler() = default;

void StepProfiler::step_begins(int64_t step) {
  if (step != first_ || recording_) return;
  // This rank's node may not have the output directory yet (rank 0 makes it on its own node).
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path_).parent_path(), ec);
  file_ = std::make_unique<std::ofstream>(path_);
  if (!*file_) throw IoError("DDPRUN_PROFILE: cannot write " + path_ + " (" + std::strerror(errno) + ")");
  recording_ = std::make_unique<torch::autograd::profiler::RecordProfile>(*file_);
}

void StepProfiler::step_ends(int64_t step) {
  if (step != last_ || !recording_) return;
  recording_.reset();  // writes the trace
  file_->close();
  if (!*file_) throw IoError("DDPRUN_PROFILE: cannot write " + path_);
  spdlog::info("profile of steps {} to {} written to {}", first_, last_, path_);
}

}  // namespace ddp
