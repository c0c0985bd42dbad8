#include "ddp/optim/optim_config.h"

#include "ddp/config/config_schema.h"

namespace ddp {

namespace {

void declare_keys(ConfigSchema& schema, OptimConfig& config) {
  schema.section("optim", "The optimizer.");
  schema.add("optim.name", &config.name, "optimizer").choices({"sgd", "adam", "adamw"});
  schema.add("optim.lr", &config.lr, "base learning rate, before lr_scaling").greater_than(0)
      .max(1e6);
  // Note [Keys a choice reads]: one set for another optimizer is said.
  schema.set_reader("sgd");
  schema.add("optim.momentum", &config.momentum, "sgd").min(0).less_than(1);
  schema.add("optim.nesterov", &config.nesterov, "sgd: Nesterov momentum (needs momentum > 0)");
  schema.set_reader("");
  schema.add("optim.weight_decay", &config.weight_decay, "weight decay; adamw decouples it from the gradient").min(0)
      .max(1e6);
  schema.add("optim.decay_params", &config.decay_params,
             "which parameters weight_decay applies to: all (torch.optim's default), or matrices: those of two or "
             "more dimensions (weights and embeddings), not biases or norm gains (nanoGPT's grouping)")
      .choices({"all", "matrices"});
  schema.set_readers({"adam", "adamw"});
  schema.add("optim.beta1", &config.beta1, "adam, adamw").min(0).less_than(1);
  schema.add("optim.beta2", &config.beta2, "adam, adamw").min(0).less_than(1);
  schema.set_readers({});
  schema.add("optim.eps", &config.eps, "adam, adamw, and optim.embeddings rowwise_adagrad").greater_than(0)
      .max(1);
  schema.add("optim.embeddings", &config.embeddings,
             "how embedding tables (dlrm's) are updated: dense, by optim.name like any parameter; sgd or "
             "rowwise_adagrad, only the rows a step touched, apart from optim.name (rowwise_adagrad keeps one sum "
             "of squares per row: TorchRec's default); auto, dense when model.embedding_sharding is replicate and "
             "rowwise_adagrad when it shards the tables")
      .choices({"auto", "dense", "sgd", "rowwise_adagrad"});
  schema.add("optim.embeddings_lr", &config.embeddings_lr,
             "the tables' learning rate under optim.embeddings sgd or rowwise_adagrad, scaled by optim.lr_scaling and "
             "following the schedule as optim.lr is; 0: optim.lr")
      .min(0)
      .max(1e6);
  schema.add("optim.lr_scaling", &config.lr_scaling, "linear: lr × world_size (a dist.tensor group counts as one rank); sqrt: lr × its square root")
      .choices({"none", "linear", "sqrt"});
  schema.rule("optim.nesterov", [&config]() -> std::string {
    if (!config.nesterov) return "";
    if (config.name != "sgd") return "only sgd has Nesterov momentum, optim.name is " + config.name;
    return config.momentum > 0 ? "" : "needs optim.momentum > 0";
  });
}

void declare_keys(ConfigSchema& schema, ScheduleConfig& config) {
  schema.section("schedule", "The learning-rate schedule, in optimizer steps.");
  schema.add("schedule.name", &config.name, "shape after warmup").choices({"constant", "step", "cosine"});
  schema.add("schedule.warmup_steps", &config.warmup_steps, "linear ramp from 0 to lr over this many steps").min(0)
      .max(kMaxSteps);
  schema.set_reader("step");
  schema.add("schedule.step_size", &config.step_size, "step: multiply the lr by gamma every step_size steps").min(1)
      .max(kMaxSteps);
  schema.add("schedule.gamma", &config.gamma, "step: the factor").greater_than(0)
      .max(1e6);
  schema.set_reader("cosine");
  schema.add("schedule.min_lr", &config.min_lr, "cosine: the final lr, at most the lr it decays from").min(0).max(1e6);
  schema.set_reader("");
  schema.add("schedule.decay_steps", &config.decay_steps,
             "cosine: the step by which the lr reaches min_lr, warmup included, and stays there (nanoGPT's "
             "lr_decay_iters); 0: the run's last step, so a resume with a larger train.max_steps stretches the "
             "cosine and raises the lr again")
      .min(0)
      .max(kMaxSteps);
  schema.rule("schedule.decay_steps", [&config]() -> std::string {
    if (config.decay_steps == 0) return "";
    if (config.name != "cosine") return "only schedule.name cosine decays over it, schedule.name is " + config.name;
    return config.decay_steps > config.warmup_steps
               ? ""
               : "must be larger than schedule.warmup_steps (" + std::to_string(config.warmup_steps) + ")";
  });
}

}  // namespace

void declare_config(ConfigSchema& schema, OptimConfig& config) {
  declare_keys(schema, config);
  OptimConfig fresh;  // the defaults: `config` may hold loaded values
  ConfigSchema defaults;
  declare_keys(defaults, fresh);
  schema.notice_unread(
      "optim.name", [&config] { return config.name; }, defaults);
}

void declare_config(ConfigSchema& schema, ScheduleConfig& config) {
  declare_keys(schema, config);
  ScheduleConfig fresh;
  ConfigSchema defaults;
  declare_keys(defaults, fresh);
  schema.notice_unread(
      "schedule.name", [&config] { return config.name; }, defaults);
}

}  // namespace ddp
