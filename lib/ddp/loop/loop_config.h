#pragma once

#include <cstdint>
#include <string>

namespace ddp {

class ConfigSchema;

/// `run:` naming and seeding of the run.
struct RunConfig {
  std::string name = "run";
  std::string output_dir;  ///< empty: runs/<name>
  int64_t seed = 0;        ///< model init and dropout (the sampler and synthetic data have seeds of their own)
};

/// Where a run writes: run.output_dir, else runs/<run.name>.
std::string output_dir_of(const RunConfig& run);

/// `train:` the loop.
struct TrainLoopConfig {
  int64_t epochs = 1;
  int64_t max_steps = 0;  ///< 0: no limit; otherwise stop after this many optimizer steps
  int64_t batch_size = 64;  ///< per rank, per micro-step
  int64_t grad_accum_steps = 1;
  int64_t global_batch_size = 0;  ///< 0: off; else samples per optimizer step at any world size (Note [Global batch])
  double clip_grad_norm = 0;  ///< 0: off
  int64_t log_every = 50;     ///< optimizer steps
  std::string precision = "fp32";  ///< fp32 | bf16: autocast for forward and loss (ddp/loop/autocast_scope.h)
  bool tf32 = true;  ///< CUDA: float32 matrix products and convolutions in TensorFloat-32 (use_tf32)
  std::string cuda_graphs = "off";  ///< off | on | auto: a step captured as a CUDA graph (Note [CUDA graphs])
};

/// `eval:` evaluation on the eval split.
struct EvalConfig {
  int64_t every_epochs = 1;  ///< 0: off
  int64_t every_steps = 0;   ///< 0: off
  int64_t batch_size = 256;
  bool at_start = true;  ///< evaluate once before the first step
  bool at_end = true;    ///< evaluate once after the last step (unless it was just evaluated)
  /// Evaluate on this many batches' samples, spread evenly over the eval split; 0: all of it.
  int64_t max_batches = 0;
  bool full_neighbourhood = false;  ///< graphs: layer-wise inference over every neighbour, not sampler.fanouts
};

/// Declares the `RunConfig` keys, bound to `config`, with their defaults, docs and ranges.
void declare_config(ConfigSchema& schema, RunConfig& config);
/// Declares the `TrainLoopConfig` keys, bound to `config`, with their defaults, docs and ranges.
void declare_config(ConfigSchema& schema, TrainLoopConfig& config);
/// Declares the `EvalConfig` keys, bound to `config`, with their defaults, docs and ranges.
void declare_config(ConfigSchema& schema, EvalConfig& config);

}  // namespace ddp
