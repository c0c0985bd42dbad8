#pragma once

#include <cstdint>
#include <string>

namespace ddp {

class ConfigSchema;

/// `optim:` the optimizer.
struct OptimConfig {
  std::string name = "sgd";  ///< sgd | adam | adamw
  double lr = 0.01;          ///< base learning rate, before lr_scaling
  double momentum = 0.9;     ///< sgd
  bool nesterov = false;     ///< sgd
  double weight_decay = 0;
  std::string decay_params = "all";  ///< all | matrices: weight decay on parameters of >= 2 dimensions only (nanoGPT)
  double beta1 = 0.9;        ///< adam, adamw
  double beta2 = 0.999;      ///< adam, adamw
  double eps = 1e-8;         ///< adam, adamw
  /// auto | dense | sgd | rowwise_adagrad: how embedding tables are updated (auto: dense when
  /// replicated, rowwise_adagrad when sharded; Note [Row updates])
  std::string embeddings = "auto";
  double embeddings_lr = 0;  ///< the tables' base lr under sgd or rowwise_adagrad; 0: optim.lr
  std::string lr_scaling = "none";  ///< none | linear | sqrt: lr × world_size or × sqrt(world_size)
};

/// `schedule:` the learning-rate schedule, in optimizer steps.
struct ScheduleConfig {
  std::string name = "constant";  ///< constant | step | cosine
  int64_t warmup_steps = 0;       ///< linear ramp from 0 to lr
  int64_t step_size = 1000;       ///< step: multiply by gamma every step_size steps
  double gamma = 0.1;             ///< step
  double min_lr = 0;              ///< cosine: final lr
  /// cosine: the step by which the lr has decayed to min_lr, warmup included (nanoGPT's
  /// lr_decay_iters); 0: the run's last step, so that raising train.max_steps stretches it
  int64_t decay_steps = 0;
};

/// Declares the `OptimConfig` keys, bound to `config`, with their defaults, docs and ranges.
void declare_config(ConfigSchema& schema, OptimConfig& config);
/// Declares the `ScheduleConfig` keys, bound to `config`, with their defaults, docs and ranges.
void declare_config(ConfigSchema& schema, ScheduleConfig& config);

}  // namespace ddp
