#include "ddp/data/device_staging.h"

#include <stdexcept>

#ifdef DDP_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <optional>
#endif

namespace ddp {

#ifdef DDP_WITH_CUDA
namespace {

// One copy stream per assembling thread, never the step's: copies run beside the step's kernels.
c10::cuda::CUDAStream copy_stream(c10::DeviceIndex device) {
  thread_local std::optional<c10::cuda::CUDAStream> stream;
  if (!stream || stream->device_index() != device)
    stream = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device);
  return *stream;
}

template <typename Visit>
void for_each_tensor(const Batch& batch, Visit&& visit) {
  for (const auto& input : batch.inputs)
    if (input.defined()) visit(input);
  if (batch.targets.defined()) visit(batch.targets);
}

}  // namespace
#endif

StagedBatch DeviceStaging::stage(Batch batch) const {
  if (!device_.is_cuda()) return {batch.to(device_), nullptr};
#ifdef DDP_WITH_CUDA
  c10::cuda::CUDAGuard device_guard(device_);
  const auto stream = copy_stream(device_.index());
  c10::cuda::CUDAStreamGuard stream_guard(stream);
  StagedBatch staged{batch.to(device_), nullptr};  // from pinned memory: queued, not waited for
  auto done = std::make_shared<at::cuda::CUDAEvent>();
  done->record(stream);
  staged.copy_done = std::move(done);
  return staged;
#else
  throw std::logic_error("DeviceStaging: a CUDA device in a build without CUDA");
#endif
}

Batch DeviceStaging::hand_over(StagedBatch staged) const {
  if (!staged.copy_done) return std::move(staged.batch);
#ifdef DDP_WITH_CUDA
  const auto step_stream = c10::cuda::getCurrentCUDAStream(device_.index());
  static_cast<at::cuda::CUDAEvent*>(staged.copy_done.get())->block(step_stream);
  for_each_tensor(staged.batch, [&](const torch::Tensor& t) { t.record_stream(step_stream); });
  return std::move(staged.batch);
#else
  throw std::logic_error("DeviceStaging: a CUDA copy in a build without CUDA");
#endif
}

}  // namespace ddp
