#include "ddp/loop/step_graph.h"

#include <stdexcept>

#ifdef DDP_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

// Thread-local capture (CUDAGraph::capture_begin's mode) and the fused AdamW's tensor learning rate.
#define DDP_LIBTORCH_CAPTURES_STEPS (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3))

namespace ddp {
namespace {

std::string shape_of(const torch::Tensor& t) {
  std::string text = "[";
  for (int64_t d = 0; d < t.dim(); ++d) text += (d ? ", " : "") + std::to_string(t.size(d));
  return text + "] " + std::string(c10::toString(t.scalar_type()));
}

bool same_layout(const torch::Tensor& a, const torch::Tensor& b) {
  return a.defined() == b.defined() && (!a.defined() || (a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type()));
}

// Into a static input, from a batch the prefetcher staged on the device (Note [Staged batches]).
[[maybe_unused]] void copy_into(torch::Tensor& to, const torch::Tensor& from) {
  if (to.defined()) to.copy_(from, /*non_blocking=*/true);
}

}  // namespace

StepGraphFacts step_graph_facts(const TrainConfig& config, const torch::Device& device, int world_size,
                                bool row_updates) {
  StepGraphFacts facts;
  facts.on_gpu = device.is_cuda();
  facts.libtorch_captures = libtorch_captures_steps();
  facts.world_size = world_size;
  facts.shard = config.mesh.shard;
  facts.row_updates = row_updates;
  facts.optimizer = config.optim.name;
  facts.task = config.task.task;
  facts.model = config.model.name;
  facts.activation_checkpointing = config.model.activation_checkpointing;
  return facts;
}

std::optional<std::string> step_graph_blocker(const StepGraphFacts& facts) {
  if (!facts.on_gpu) return "the model is on the CPU (a CUDA graph is a GPU's)";
  if (!facts.libtorch_captures)
    return "this LibTorch cannot capture a step (it needs a CUDA build of LibTorch 2.3 or later: thread-local "
           "capture and a fused AdamW that reads its learning rate from the GPU)";
  if (facts.world_size > 1)
    return "the step's collectives across " + std::to_string(facts.world_size) +
           " ranks are not captured yet (only a step at world 1 is)";
  if (facts.shard != "none")
    return "dist.shard: " + facts.shard + " gathers and frees state as the step goes, which a replay would not";
  if (facts.row_updates) return "embedding tables stepped by rows (optim.embeddings) choose their rows on the host";
  if (facts.optimizer != "adamw")
    return "optim.name: " + facts.optimizer + " keeps state on the host; only adamw's step is captured";
  if (facts.task == "node_classification")
    return "train.task: node_classification reads its sampled blocks' sizes on the host in each step";
  if (facts.activation_checkpointing != "none")
    return "model.activation_checkpointing: " + facts.activation_checkpointing +
           " sets the CUDA generator's state to recompute blocks, which a capture refuses";
  if (facts.model == "torchscript")
    return "model.name: torchscript's executor may still be compiling the module when the capture comes";
  return std::nullopt;
}

bool libtorch_captures_steps() {
#if defined(DDP_WITH_CUDA) && DDP_LIBTORCH_CAPTURES_STEPS
  return true;
#else
  return false;
#endif
}

#ifdef DDP_WITH_CUDA
struct StepGraph::Cuda {
  explicit Cuda(const torch::Device& device)
      : device(device), stream(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index())) {}
  torch::Device device;
  c10::cuda::CUDAStream stream;  // captures happen on a stream of their own, never the default one
  at::cuda::CUDAGraph graph;

  // Runs `work` on the capture stream, ordered after what the current stream has queued, and the
  // current stream's later work after it.
  template <typename Work>
  auto on_capture_stream(Work&& work) {
    c10::cuda::CUDAGuard device_guard(device);
    auto current = c10::cuda::getCurrentCUDAStream(device.index());
    at::cuda::CUDAEvent queued;
    queued.record(current);
    queued.block(stream);
    auto result = [&] {
      c10::cuda::CUDAStreamGuard guard(stream);
      return work();
    }();
    at::cuda::CUDAEvent done;
    done.record(stream);
    done.block(current);
    return result;
  }
};
#else
struct StepGraph::Cuda {};
#endif

StepGraph::StepGraph(const torch::Device& device) {
  StepGraphFacts facts;
  facts.on_gpu = device.is_cuda();
  facts.libtorch_captures = libtorch_captures_steps();
  if (!facts.on_gpu || !facts.libtorch_captures)
    throw std::logic_error("StepGraph: " + step_graph_blocker(facts).value_or("cannot capture"));
#ifdef DDP_WITH_CUDA
  cuda_ = std::make_unique<Cuda>(device);
#endif
}

StepGraph::~StepGraph() = default;

bool StepGraph::fits(const std::vector<Batch>& batches) const {
  if (!captured_ || batches.size() != inputs_.size()) return false;
  for (std::size_t m = 0; m < batches.size(); ++m) {
    const Batch &given = batches[m], &held = inputs_[m];
    if (given.inputs.size() != held.inputs.size() || !same_layout(given.targets, held.targets)) return false;
    for (std::size_t i = 0; i < given.inputs.size(); ++i)
      if (!same_layout(given.inputs[i], held.inputs[i])) return false;
  }
  return true;
}

torch::Tensor StepGraph::run_on_capture_stream(const std::vector<Batch>& batches, const Body& body) {
#ifdef DDP_WITH_CUDA
  return cuda_->on_capture_stream([&] { return body(batches); });
#else
  (void)batches;
  (void)body;
  throw std::logic_error("StepGraph: not a CUDA build");
#endif
}

torch::Tensor StepGraph::capture(std::vector<Batch> batches, const Body& body) {
#ifdef DDP_WITH_CUDA
  inputs_ = std::move(batches);
  c10::cuda::device_synchronize();  // as torch.cuda.graph does: nothing eager still running
  cuda_->on_capture_stream([&] {
#if DDP_LIBTORCH_CAPTURES_STEPS
    cuda_->graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
#else
    cuda_->graph.capture_begin();
#endif
    try {
      loss_ = body(inputs_);
    } catch (...) {
      // End the capture so the stream leaves capture mode; the graph is not used.
      try {
        cuda_->graph.capture_end();
      } catch (...) {
      }
      throw;
    }
    cuda_->graph.capture_end();
    return 0;
  });
  captured_ = true;
  cuda_->graph.replay();  // the captured step, run
  return loss_.clone();
#else
  (void)batches;
  (void)body;
  throw std::logic_error("StepGraph: not a CUDA build");
#endif
}

torch::Tensor StepGraph::replay(const std::vector<Batch>& batches) {
#ifdef DDP_WITH_CUDA
  for (std::size_t m = 0; m < batches.size(); ++m) {
    for (std::size_t i = 0; i < batches[m].inputs.size(); ++i) copy_into(inputs_[m].inputs[i], batches[m].inputs[i]);
    copy_into(inputs_[m].targets, batches[m].targets);
  }
  cuda_->graph.replay();
  return loss_.clone();
#else
  (void)batches;
  throw std::logic_error("StepGraph: not a CUDA build");
#endif
}

std::string StepGraph::shapes() const {
  std::string text = std::to_string(inputs_.size()) + " ×";
  if (!inputs_.empty())
    for (std::size_t i = 0; i < inputs_.front().inputs.size(); ++i)
      text += (i ? ", " : " ") + shape_of(inputs_.front().inputs[i]);
  return text;
}

}  // namespace ddp
