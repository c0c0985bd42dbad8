#include "ddp/loop/loop_config.h"

#include "ddp/common/text.h"
#include "ddp/config/config_schema.h"

namespace ddp {

std::string output_dir_of(const RunConfig& run) { return run.output_dir.empty() ? "runs/" + run.name : run.output_dir; }

void declare_config(ConfigSchema& schema, RunConfig& config) {
  schema.section("run", "Naming and seeding of the run.");
  schema.add("run.name", &config.name, "name of the run").non_empty();
  schema.add("run.output_dir", &config.output_dir,
             "metrics, checkpoints and the resolved config go here; empty: `runs/<name>`")
      .file_path();
  // It names a directory under runs/: ".." or "a/../../x" would write elsewhere (issue 22, item 16).
  schema.rule("run.name", [&config]() -> std::string {
    const std::string& name = config.name;
    bool escapes = name.find('/') != std::string::npos || name == "." || name == "..";
    return config.output_dir.empty() && escapes
               ? "must name one directory under runs/ (no '/', not '.' or '..'), got '" + printable(name, 80) +
                     "'; run.output_dir takes a path"
               : "";
  });
  schema.add("run.seed", &config.seed, "model initialisation and dropout; the sampler (sampler.seed) and synthetic data (data.synthetic_seed) have their own");
}

void declare_config(ConfigSchema& schema, TrainLoopConfig& config) {
  schema.section("train", "The loop.");
  schema.add("train.epochs", &config.epochs, "passes over the training set").min(1)
      .max(kMaxEpochs);
  schema.add("train.max_steps", &config.max_steps, "stop after this many optimizer steps; 0: no limit").min(0)
      .max(kMaxSteps);
  schema.add("train.batch_size", &config.batch_size, "samples per rank, per micro-step; with train.global_batch_size, or under a pipeline, the "
             "largest micro-batch (a pipeline's microbatch)").min(1)
      .max(1e7);
  schema.add("train.grad_accum_steps", &config.grad_accum_steps, "micro-steps per optimizer step; under a pipeline it multiplies the global batch, which "
             "dist.microbatches then cuts").min(1)
      .max(1e6);
  schema.add("train.global_batch_size", &config.global_batch_size,
             "samples per optimizer step over all ranks, the same at any world size and layout: each rank (each "
             "pipeline replica) takes its share in micro-steps (microbatches) of at most train.batch_size (elastic "
             "jobs keep training the same); 0: off, world size × batch_size × grad_accum_steps")
      .min(0)
      .max(1e9);
  schema.rule("train.grad_accum_steps", [&config]() -> std::string {
    return config.global_batch_size > 0 && config.grad_accum_steps != 1
               ? "is chosen from train.global_batch_size when that is set; leave it at 1 (train.batch_size caps "
                 "the micro-batch)"
               : "";
  });
  schema.add("train.clip_grad_norm", &config.clip_grad_norm, "clip the global gradient norm to this; 0: off").min(0)
      .max(1e12);
  schema.add("train.log_every", &config.log_every, "optimizer steps between log lines").min(1)
      .max(kMaxSteps);
  schema.add("train.precision", &config.precision,
             "bf16: forward and loss under autocast (matrix products in bfloat16; weights, gradients and the "
             "optimizer in float32), on the GPU or the CPU; fp32: float32 throughout")
      .choices({"fp32", "bf16"});
  schema.add("train.tf32", &config.tf32,
             "on a GPU that has TensorFloat-32 (Ampere and later): float32 matrix products and convolutions in it "
             "(10-bit mantissa, float32's range), as nanoGPT sets it, several times faster than full float32; "
             "false: full float32. Nothing changes on the CPU");
  schema.add("train.cuda_graphs", &config.cuda_graphs,
             "capture a whole training step on the GPU as one CUDA graph after two eager steps, and replay it for "
             "each later step of the same batch shapes (a short last batch runs eagerly): the step's kernels start "
             "from one launch. on: say on one line why when a run cannot (the CPU, several ranks, dist.shard, "
             "embedding tables stepped by rows, an optimizer other than adamw, a LibTorch before 2.3) and run "
             "eagerly; auto: the same, quietly on the CPU; off: eagerly. Not yet measured on a GPU, hence off")
      .choices({"off", "on", "auto"});
}

void declare_config(ConfigSchema& schema, EvalConfig& config) {
  schema.section("eval", "Evaluation on the eval split (data.eval_split).");
  schema.add("eval.every_epochs", &config.every_epochs, "evaluate every this many epochs; 0: off").min(0)
      .max(kMaxEpochs);
  schema.add("eval.every_steps", &config.every_steps, "evaluate every this many optimizer steps; 0: off").min(0)
      .max(kMaxSteps);
  schema.add("eval.batch_size", &config.batch_size, "samples per eval batch").min(1)
      .max(1e7);
  schema.add("eval.at_start", &config.at_start, "evaluate once before the first step");
  schema.add("eval.at_end", &config.at_end,
             "evaluate once after the last step, unless that step was just evaluated; on even with "
             "eval.every_epochs and eval.every_steps 0");
  schema.add("eval.max_batches", &config.max_batches,
             "evaluate on max_batches × eval.batch_size samples spread evenly over the eval split, the same ones "
             "every time and at any world size (nanoGPT's eval_iters); 0: every sample")
      .min(0)
      .max(1e9);
  schema.add("eval.full_neighbourhood", &config.full_neighbourhood,
             "graphs: evaluate with every neighbour at every hop, by layer-wise inference over all nodes (as PyG's "
             "inference), rather than with sampler.fanouts");
}

}  // namespace ddp
