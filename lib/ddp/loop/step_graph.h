#pragma once
// Note [CUDA graphs]
// train.cuda_graphs captures a whole training step (forwards, backwards, clipping, the optimizer's
// step, zeroing the gradients) as one CUDA graph and replays it: the GPU then runs the step's
// hundreds of kernels from one launch, and the host does nothing but copy the batch in. A replay
// reruns the captured kernels on the captured addresses, so:
// - the inputs are static: each step's batches are copied into the captured step's own tensors,
//   and a step whose batches have other shapes (a short last batch) runs eagerly;
// - nothing the host computes may change between steps inside it: the learning rate lives in a
//   device tensor the fused AdamW reads (ForeachAdamW::hold_lr_on_device), filled before each
//   replay, and the optimizer's step counts live on the device; the host's copies of the counts,
//   which checkpoints hold, are advanced after each replay (ForeachAdamW::replayed);
// - a step reads nothing back (a read cannot be captured; the host-read count is 0 at world 1);
// - the host-side work of a step (the stop vote, heartbeats, the counts of samples and tokens)
//   is done around the replay.
// Two eager steps come first (the second on the capture stream: lazy set-ups, such as cuBLAS's
// workspace for that stream, happen outside the capture), then the third full step is captured and
// replayed at once. Capture uses CUDA's thread-local mode, so the batch threads' pinned-memory
// calls do not break it, and the fused AdamW's tensor learning rate: both need LibTorch 2.3 or later.
// What cannot be captured yet runs eagerly, with one line saying why: several ranks (their
// collectives), sharded or row-updated state (gathered, freed or chosen on the host), optimizers
// other than adamw, graph tasks (their sampled blocks are read on the host), recomputed blocks (they
// set the CUDA generator's state, which a capture refuses) and TorchScript modules (their executor
// may still be compiling when the capture comes).

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddp/data/batch.h"
#include "ddp/loop/train_config.h"

namespace ddp {

/// What decides whether a run's steps can be captured (Note [CUDA graphs]).
struct StepGraphFacts {
  bool on_gpu = false;
  bool libtorch_captures = false;  ///< libtorch_captures_steps()
  int world_size = 1;
  std::string shard = "none";   ///< dist.shard
  bool row_updates = false;     ///< embedding tables stepped by rows, apart from the optimizer
  std::string optimizer;        ///< optim.name
  std::string task = "causal_lm";             ///< train.task
  std::string model = "gpt";                  ///< model.name
  std::string activation_checkpointing = "none";  ///< model.activation_checkpointing
};

/// A run's facts: its config, this rank's device and world, and whether a pass steps tables by rows.
StepGraphFacts step_graph_facts(const TrainConfig& config, const torch::Device& device, int world_size,
                                bool row_updates);

/// Why a run of `facts` cannot have its steps captured, as the end of a sentence; nothing when it can.
std::optional<std::string> step_graph_blocker(const StepGraphFacts& facts);

/// Whether this LibTorch can capture a step: a CUDA build of 2.3 or later (Note [CUDA graphs]).
bool libtorch_captures_steps();

/// One captured step and its static inputs, on one GPU.
class StepGraph {
 public:
  /// A step's work on these micro-batches (on the device): its loss sum.
  using Body = std::function<torch::Tensor(const std::vector<Batch>&)>;

  /// Throws std::logic_error on a build that cannot capture (libtorch_captures_steps()).
  explicit StepGraph(const torch::Device& device);
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  bool captured() const { return captured_; }
  /// Whether `batches` can be replayed: as many as were captured, each tensor of its shape and dtype.
  bool fits(const std::vector<Batch>& batches) const;
  /// Runs `body` on `batches` eagerly on the capture stream (a warm-up step).
  torch::Tensor run_on_capture_stream(const std::vector<Batch>& batches, const Body& body);
  /// Captures `body` on `batches`, which become the static inputs, then replays it once: the step
  /// is done. Its loss sum, a copy.
  torch::Tensor capture(std::vector<Batch> batches, const Body& body);
  /// Copies `batches` (host or device tensors) into the static inputs and replays: the step is done.
  /// Its loss sum, a copy.
  torch::Tensor replay(const std::vector<Batch>& batches);
  /// "2 × [16, 1024] int64, ..." for messages: the captured micro-batches' input shapes.
  std::string shapes() const;

 private:
  struct Cuda;  // the capture stream and the graph (DDP_WITH_CUDA)
  std::unique_ptr<Cuda> cuda_;
  std::vector<Batch> inputs_;
  torch::Tensor loss_;
  bool captured_ = false;
};

}  // namespace ddp
