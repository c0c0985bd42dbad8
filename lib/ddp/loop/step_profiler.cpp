#include "ddp/loop/step_profiler.h"

#include <spdlog/spdlog.h>
#include <torch/cuda.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/csrc/autograd/profiler_legacy.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "ddp/common/error.h"

namespace ddp {

StepProfiler::StepProfiler(const std::string& output_dir, int rank, const torch::Device& device)
    : kineto_(device.is_cuda()), device_index_(device.is_cuda() && device.has_index() ? device.index() : -1) {
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

// Kineto's trace of what the GPU ran, written once the GPU has run everything queued: the last
// step's kernels would be missing otherwise (nothing in a step waits for them).
void StepProfiler::save_kineto_trace() {
  kineto_recording_ = false;
  torch::cuda::synchronize(device_index_);
  torch::autograd::profiler::disableProfiler()->save(path_);
}

StepProfiler::~StepProfiler() {
  if (!kineto_recording_) return;  // the legacy recording writes its trace as it is destroyed
  try {  // a run that ended before the last step asked for: what was recorded
    save_kineto_trace();
  } catch (const std::exception& e) {
    spdlog::warn("DDPRUN_PROFILE: the trace of the steps recorded could not be written to {}: {}", path_, e.what());
  }
}

void StepProfiler::step_begins(int64_t step) {
  if (step != first_ || recording_ || kineto_recording_) return;
  // This rank's node may not have the output directory yet (rank 0 makes it on its own node).
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path_).parent_path(), ec);
  file_ = std::make_unique<std::ofstream>(path_);
  if (!*file_) throw IoError("DDPRUN_PROFILE: cannot write " + path_ + " (" + std::strerror(errno) + ")");
  if (kineto_) {  // torch.profiler's way: this thread's operators (and autograd's), every kernel
    using torch::profiler::impl::ActivityType;
    const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
    const std::set<ActivityType> activities{ActivityType::CPU, ActivityType::CUDA};
    try {
      torch::autograd::profiler::prepareProfiler(config, activities);
      torch::autograd::profiler::enableProfiler(config, activities);
      file_.reset();  // Kineto writes the file itself
      kineto_recording_ = true;
      return;
    } catch (const c10::Error& e) {  // a LibTorch built without Kineto
      kineto_ = false;
      spdlog::warn("DDPRUN_PROFILE: this LibTorch cannot record the GPU's kernels ({}): the host's operators only",
                   e.what_without_backtrace());
    }
  }
  recording_ = std::make_unique<torch::autograd::profiler::RecordProfile>(*file_);
}

void StepProfiler::step_ends(int64_t step) {
  if (step != last_ || (!recording_ && !kineto_recording_)) return;
  if (kineto_recording_) {
    save_kineto_trace();
    std::error_code ec;
    if (std::filesystem::file_size(path_, ec) == 0 || ec) throw IoError("DDPRUN_PROFILE: cannot write " + path_);
  } else {
    recording_.reset();  // writes the trace
    file_->close();
    if (!*file_) throw IoError("DDPRUN_PROFILE: cannot write " + path_);
  }
  spdlog::info("profile of steps {} to {} written to {}{}", first_, last_, path_,
               kineto_ ? " (the host's operators and the GPU's kernels)" : "");
}

}  // namespace ddp
