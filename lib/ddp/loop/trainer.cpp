#include "ddp/loop/trainer.h"

#include <signal.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>

#include "ddp/comm/collective_tracker.h"
#include "ddp/comm/collectives.h"
#include "ddp/common/directory_lock.h"
#include "ddp/common/error.h"
#include "ddp/common/malloc_tuning.h"
#include "ddp/common/run_main.h"
#include "ddp/common/text.h"
#include "ddp/loop/autocast_scope.h"
#include "ddp/loop/evaluator.h"
#include "ddp/loop/global_batch.h"
#include "ddp/loop/prior_run.h"
#include "ddp/loop/same_weights.h"
#include "ddp/model/model_registry.h"
#include "ddp/optim/foreach_adamw.h"
#include "ddp/optim/optimizer_factory.h"

namespace ddp {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

Trainer::Trainer(TrainConfig config, WorkerIdentity env, c10::intrusive_ptr<c10d::Store> shared_store)
    : config_(std::move(config)), later_attempt_{env.round, env.node_count, env.requeues} {
  plan_ = std::make_unique<ParallelPlan>(connect(env, config_.dist, std::move(shared_store)), config_.mesh,
                                         config_.dist, env.local_world_size);
  const Communicator& world = plan_->world();
  use_tf32(config_.train.tf32);
  if (world.rank == 0 && world.device.is_cuda())
    spdlog::info("train.tf32: float32 matrix products in {}", config_.train.tf32 ? "TensorFloat-32 where the GPU has it"
                                                                                 : "full float32");
  std::string resolved = to_yaml(config_);
  // Named by key: a line alone ("  seed: 3") may be run.seed's or sampler.seed's.
  check_identical_across_ranks(world, "config", to_yaml_without_paths(config_),
                               "start every rank with the same config and build",
                               [](const std::string& rank_0, const std::string& theirs) {
                                 std::string text;
                                 for (const auto& change : config_changes(rank_0, theirs))
                                   text += (text.empty() ? "" : ", ") + change.key + " " + change.after + " (rank 0: " +
                                           change.before + ")";
                                 return text;
                               });
  // Note [Re-running a run]: rank 0 reads the run directory, before anything is written to it, and
  // decides for every rank (an action's digit, then its message).
  // An explicit checkpoint.resume is judged too: it would overwrite a finished run's outputs.
  std::string verdict;
  if (world.rank == 0 && config_.checkpoint.resume != "never") {
    // run.output_dir outranks run.name: advice to change the name would change nothing.
    const std::string new_run = config_.run.output_dir.empty() ? "--set run.name=NEW" : "--set run.output_dir=NEW_DIR";
    // A live run's directory first: advice about its outputs ("remove it to start there") is wrong.
    const std::string dir = output_dir_of(config_.run);
    auto holder = DirectoryLock::holder(dir);
    PriorRunVerdict judged = holder ? PriorRunVerdict{PriorRunVerdict::Action::kRefuse,
                                                      DirectoryLock::in_use(dir, "run.output_dir", *holder)}
                                    : judge_prior_run(dir, resolved, new_run);
    if (judged.action == PriorRunVerdict::Action::kFinished && config_.checkpoint.resume != "auto")
      judged = {PriorRunVerdict::Action::kRefuse,
                "checkpoint.resume: " + judged.message + " (resuming " + config_.checkpoint.resume + " there would " +
                    "overwrite them; " + new_run + " resumes it into a new run directory)"};
    verdict = std::to_string(static_cast<int>(judged.action)) + judged.message;
  }
  broadcast_bytes(world, verdict, 0);
  using Action = PriorRunVerdict::Action;
  Action action = verdict.empty() ? Action::kStart : static_cast<Action>(verdict[0] - '0');
  if (action == Action::kRefuse) throw UserError(verdict.substr(1));
  if (action == Action::kFinished) {
    if (world.rank == 0) spdlog::info("{}", verdict.substr(1));
    already_finished_ = true;
    return;
  }
  if (action == Action::kResume) changed_since_ = verdict.substr(1);
  if (action == Action::kStart && verdict.size() > 1 && world.rank == 0) spdlog::warn("{}", verdict.substr(1));
  const Communicator& replicas = plan_->data_parallel();  // the ranks that split the samples
  // Before anything is written: a global batch the layout cannot split ends the run here.
  GlobalBatchShare share = share_step(config_, world.world_size);

  step_shape_ = {replicas.world_size, share.batch_size, share.grad_accum_steps, share.microbatched,
                 config_.train.grad_accum_steps, batch_ranks(config_, world.world_size)};
  config_.train.batch_size = share.batch_size;
  config_.train.grad_accum_steps = share.grad_accum_steps;
  recorder_ = std::make_unique<RunRecorder>(config_, world, output_dir_of(config_.run), resolved, side_values_,
                                            share.formation, step_shape_.samples());
  profiler_ = std::make_unique<StepProfiler>(output_dir_of(config_.run), world.rank, world.device);

  // Each rank reads model.init_from on its own node, only what it keeps: the same weights everywhere.
  // Note [model.init_from gone]: each rank decided on its own node; all decide alike, or all stop
  // (ranks comparing init_from with ranks that skip it would pair collectives wrongly).
  const bool gone_here = !config_.model.init_from_gone_run_dir.empty();
  if (!config_.model.init_from.empty() && world.world_size > 1) {
    auto gone = torch::zeros({world.world_size}, torch::kDouble);
    gone[world.rank] = gone_here ? 1 : 0;
    gone = all_reduce_sum(world, gone);
    std::string ranks;
    for (int r = 0; r < world.world_size; ++r)
      if (gone[r].item<double>() > 0) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    if (!ranks.empty() && gone.sum().item<double>() < world.world_size)
      throw UserError("model.init_from: " + config_.model.init_from + " is gone on the node(s) of rank(s) " + ranks +
                      " and there on the others: give every node the same, or none (the run resumes from its "
                      "checkpoint without it)");
  }
  if (!config_.model.init_from.empty() && !gone_here && world.world_size > 1)
    check_same_weights(world, config_.model.init_from);
  TaskContext context;
  context.device = world.device;
  // One rank sums with itself: the same layers and arithmetic at every world size.
  context.model.cross_rank_sum = [&replicas](const torch::Tensor& values) {
    return replicas.world_size > 1 ? all_reduce_sum(replicas, values) : values;
  };
  context.model.warn = world.rank == 0;
  context.model.defer_tables = pass_makes_tables(config_);
  context.model.defer_parameters = pass_builds_parameters(config_);
  context.full_neighbourhood_eval = config_.eval.full_neighbourhood;
  context.head_stays_whole = head_stays_whole(config_);
  context.model.seed = static_cast<uint64_t>(config_.run.seed);
  task_ = make_task(config_.task, config_.data, config_.sampler, config_.model, config_.loss, context);
  // Ranks draw from one permutation of the samples: a node's copy of other data (paths may differ
  // between nodes) would train on other samples, and fail later in a collective, far from the
  // cause, or, the same size, train on silently.
  const std::string content = task_->data_content();
  check_identical_across_ranks(world, "data",
                               fmt::format("{} training samples, {} held out{}", task_->size(Split::kTrain),
                                           task_->size(Split::kEval), content.empty() ? "" : ", content " + content),
                               "give every node the same data (data.path, data.eval_path)");

  sampler_ = std::make_unique<DistributedSampler>(task_->size(Split::kTrain), replicas.world_size, replicas.rank,
                                                  config_.sampler);
  // Zero steps would "finish" at once with exit 0 and an untrained model (issue 22, item 16).
  if (sampler_->num_samples() == 0) {
    // Which key drops the remainder: chunk always does, distributed only with drop_last.
    const bool chunk = config_.sampler.split == "chunk";
    throw UserError(std::string(chunk ? "sampler.split: chunk" : "sampler.drop_last") + ": the " +
                    std::to_string(task_->size(Split::kTrain)) + " training samples leave none for each of " +
                    std::to_string(replicas.world_size) + " ranks; use fewer ranks or " +
                    (chunk ? "sampler.split: distributed (which repeats some to fill up)"
                           : "sampler.drop_last: false"));
  }
  prefetcher_ = std::make_unique<BatchPrefetcher>(
      [task = task_.get()](const torch::Tensor& indices) { return task->make_batch(Split::kTrain, indices); },
      config_.data, world.device);
  // The vote and the monitor's numbers (reserved by the recorder) travel with the gradients.
  stop_vote_ = std::make_unique<StopVote>(side_values_);
  parallel_ = parallelize(*task_, *plan_, config_, side_values_);  // Note [Passes]
  recorder_->set_rank_part(parallel_->part);
  recorder_->report_setup_memory();
  double lr = scaled_lr(config_.optim, static_cast<int>(step_shape_.lr_ranks));
  std::vector<torch::Tensor> optimized = optimizer_parameters(*parallel_, *plan_);
  optimizer_ = make_optimizer(optimized, config_.optim, lr, plan_->optimizer_parameter_dims());
  schedule_ = std::make_unique<LrSchedule>(config_.schedule, lr, total_steps());
  checkpointer_ = std::make_unique<Checkpointer>(config_.checkpoint, output_dir_of(config_.run) + "/checkpoints");
  const auto* built = dynamic_cast<const Model*>(&task_->model());
  checkpointer_->set_run_identity({resolved, task_->data_fingerprint(), built ? built->code_fingerprint() : ""});
  progress_.batch_size = config_.train.batch_size;
  progress_.accum_steps = config_.train.grad_accum_steps;
  progress_.lr_ranks = step_shape_.lr_ranks;
  if (!resume() && !config_.model.init_from_gone_run_dir.empty())
    throw ConfigError("model.init_from: " + config_.model.init_from + " does not exist, and " +
                      checkpointer_->directory() + " holds no checkpoint to resume from" +
                      (config_.checkpoint.resume == "never" ? " (checkpoint.resume: never)" : "") +
                      ": the run cannot go on without the weights it started from");
  if (!config_.model.init_from_gone_run_dir.empty() && plan_->world().rank == 0) {
    spdlog::info(
        "model.init_from {} is gone: the run goes on from its own checkpoint, with the model keys its "
        "config.yaml recorded",
        config_.model.init_from);
    // Its config.json's other keys (a Hugging Face directory's bos_token_id, ...) reach the end's
    // config.json from the run's own, which only an earlier end wrote.
    if (init_from_hugging_face_directory(config_.model) &&
        !std::filesystem::exists(std::filesystem::path(config_.model.init_from_gone_run_dir) / "config.json"))
      spdlog::warn(
          "{} has no config.json of its own yet (no earlier end wrote one): the config.json this run "
          "ends with has the model's own keys only, not the others of {}'s",
          config_.model.init_from_gone_run_dir, config_.model.init_from);
  }
  set_up_step_graph();  // after resume: the optimizer's state is the one steps will update
  return_setup_memory();
}

int64_t Trainer::batches_per_epoch() const { return ceil_div(sampler_->num_samples(), config_.train.batch_size); }

int64_t Trainer::steps_per_epoch() const { return ceil_div(batches_per_epoch(), config_.train.grad_accum_steps); }

int64_t Trainer::total_steps() const {
  int64_t steps = config_.train.epochs * steps_per_epoch();
  return config_.train.max_steps > 0 ? std::min(steps, config_.train.max_steps) : steps;
}

bool Trainer::eval_still_due() const {
  if (task_->size(Split::kEval) == 0 || last_eval_step_ == progress_.step) return false;
  const bool epoch_ends = progress_.batch_in_epoch > 0 && progress_.batch_in_epoch >= batches_per_epoch();
  const int64_t epochs_done = progress_.epoch + (epoch_ends ? 1 : 0);
  if (epoch_ends && config_.eval.every_epochs > 0 && epochs_done % config_.eval.every_epochs == 0) return true;
  const bool last_step = epochs_done >= config_.train.epochs ||
                         (config_.train.max_steps > 0 && progress_.step >= config_.train.max_steps);
  return last_step && config_.eval.at_end;
}

bool Trainer::saving_deferred() const {
  return checkpointer_->due_after_step(progress_.step) && !checkpointer_->saved_at(progress_.step) &&
         last_eval_step_ == progress_.step;
}

bool Trainer::done() const {
  return progress_.epoch >= config_.train.epochs ||
         (config_.train.max_steps > 0 && progress_.step >= config_.train.max_steps);
}

int Trainer::fit() {
  if (already_finished_) return 0;
  try {
    return train_to_the_end();
  } catch (...) {
    // A collective that another rank never arrived at (it failed, was killed or hung: its status
    // is its own, this one's is 1): the record names it.
    int never_arrived = -1;
    try {
      throw;
    } catch (const CollectiveError& e) {
      if (!e.missing().empty()) never_arrived = e.missing().front();
    } catch (...) {
    }
    recorder_->failed(progress_, exit_status_of(std::current_exception()), never_arrived);  // and the report
    throw;
  }
}

int Trainer::train_to_the_end() {
  install_stop_handlers();
  int64_t per_epoch = std::max<int64_t>(1, steps_per_epoch());
  recorder_->begin(progress_, total_steps(), (total_steps() + per_epoch - 1) / per_epoch);
  task_->model().train();
  first_step_ = progress_.step;
  bool has_eval = task_->size(Split::kEval) > 0;
  if (has_eval && ((config_.eval.at_start && progress_.step == 0) || eval_after_resume_)) run_eval();

  while (!done() && !stopping()) {
    sampler_->set_epoch(progress_.epoch);
    task_->set_epoch(progress_.epoch);
    torch::Tensor indices = sampler_->indices();
    int64_t batches = ceil_div(indices.size(0), config_.train.batch_size);
    prefetcher_->start(indices, config_.train.batch_size, progress_.batch_in_epoch);
    while (progress_.batch_in_epoch < batches && !done() && !stopping()) {
      recorder_->step_begins(progress_);
      profiler_->step_begins(progress_.step);
      StepStats step = train_step(std::min(config_.train.grad_accum_steps, batches - progress_.batch_in_epoch));
      profiler_->step_ends(progress_.step - 1);
      // A replay's sync has no host timing of its own (what the reducer holds is the capture's).
      recorder_->step_ends(progress_, step, prefetcher_->waited_ms(),
                           step_replayed_ ? ReducerTiming{} : parallel_->gradient_sync->timing());
      if (!state_memory_reported_) report_state_memory();
      after_step();
    }
    if (progress_.batch_in_epoch >= batches) end_epoch();
  }
  if (graph_ && plan_->world().rank == 0)
    spdlog::info("train.cuda_graphs: {} of this run's {} steps replayed the captured one", graph_replays_,
                 progress_.step - first_step_);
  if (stopping()) return stop_after_checkpoint();
  if (has_eval && config_.eval.at_end && last_eval_step_ != progress_.step) run_eval();
  if (stopping()) return stop_after_checkpoint();
  if (saving_deferred()) save_checkpoint();
  finish();
  return 0;
}

StepStats Trainer::train_step(int64_t micro_batches) {
  plan_->before_step();
  if (graph_) return graphed_step(micro_batches);
  return eager_step(micro_batches, [this] { return prefetcher_->next(); });
}

StepStats Trainer::eager_step(int64_t micro_batches, std::function<Batch()> next_batch) {
  StepHooks hooks;
  hooks.next_batch = std::move(next_batch);
  hooks.before_last_backward = [this] {
    stop_vote_->cast();  // this rank's vote and the other side values travel with the sync
    parallel_->gradient_sync->prepare();
  };
  hooks.after_microbatch = [this](int microbatch) { recorder_->microbatch_done(progress_, microbatch); };
  // This rank's samples in the step's micro-batches: the epoch's last may be short.
  const int64_t samples = sampler_->num_samples(), batch = config_.train.batch_size;
  for (int64_t k = progress_.batch_in_epoch; k < progress_.batch_in_epoch + micro_batches; ++k)
    hooks.step_samples += std::clamp<int64_t>(samples - k * batch, 0, batch);
  StepWork work = parallel_->step->train(micro_batches, hooks);
  progress_.batch_in_epoch += micro_batches;
  optimizer_step(work.stats);
  work.stats.loss_sum = work.loss_sum;  // read at log steps only (StepStats)
  return work.stats;
}

void Trainer::set_up_step_graph() {
  const std::string& mode = config_.train.cuda_graphs;
  if (mode == "off") return;
  const Communicator& world = plan_->world();
  auto* adamw = dynamic_cast<ForeachAdamW*>(optimizer_.get());
  const StepGraphFacts facts = step_graph_facts(config_, world.device, world.world_size, parallel_->tables != nullptr);
  std::optional<std::string> blocker = step_graph_blocker(facts);
  if (!blocker && !adamw) blocker = "the optimizer is not the fused AdamW";
  if (blocker) {
    if (world.rank == 0 && mode == "on") spdlog::warn("train.cuda_graphs: on, but {}: steps run eagerly", *blocker);
    if (world.rank == 0 && mode == "auto" && facts.on_gpu)
      spdlog::info("train.cuda_graphs: auto: {}: steps run eagerly", *blocker);
    return;
  }
  graph_ = std::make_unique<StepGraph>(world.device);
  adamw->hold_lr_on_device(world.device);
}

// Note [CUDA graphs]: two eager steps, the third captured, then replays of steps of its shapes.
StepStats Trainer::graphed_step(int64_t micro_batches) {
  auto& adamw = static_cast<ForeachAdamW&>(*optimizer_);  // set_up_step_graph admits only it
  std::vector<Batch> batches;
  for (int64_t m = 0; m < micro_batches; ++m) batches.push_back(prefetcher_->next());
  // The rate this step steps with, into the tensor the fused kernel reads, before a replay or a capture.
  set_learning_rate(*optimizer_, schedule_->lr_at(progress_.step));
  adamw.load_lr();
  step_replayed_ = graph_->fits(batches);
  if (step_replayed_) {
    stop_vote_->cast();  // a replay's host work: the vote, the counts, the step
    StepStats stats;
    stats.loss_sum = graph_->replay(batches);
    adamw.replayed();
    ++graph_replays_;
    for (const Batch& batch : batches) {
      stats.batches += 1;
      stats.samples += batch.size();
      stats.sampled_edges += batch.sampled_edges;
      stats.tokens += batch.tokens;
    }
    stats.lr = progress_.lr = schedule_->lr_at(progress_.step);
    progress_.batch_in_epoch += micro_batches;
    progress_.step += 1;
    return stats;
  }
  StepStats stats;
  const StepGraph::Body body = [this, micro_batches, &stats](const std::vector<Batch>& inputs) {
    std::size_t next = 0;
    stats = eager_step(micro_batches, [&inputs, &next] { return inputs.at(next++); });
    return stats.loss_sum;
  };
  const int rank = plan_->world().rank;
  // Only a full step is captured: an epoch's short last one would leave the full ones eager.
  const bool full = micro_batches == config_.train.grad_accum_steps &&
                    std::all_of(batches.begin(), batches.end(),
                                [this](const Batch& batch) { return batch.size() == config_.train.batch_size; });
  if (graph_->captured() || !full) {  // other shapes: eagerly
    if (graph_->captured() && !graph_misfit_said_ && rank == 0) {
      graph_misfit_said_ = true;
      spdlog::info("train.cuda_graphs: step {}'s batches differ from the captured step's ({}): such steps run eagerly",
                   progress_.step, graph_->shapes());
    }
    body(batches);
    return stats;
  }
  if (graph_warm_ups_ < 2) {  // the second on the capture stream: its lazy set-ups outside the capture
    if (++graph_warm_ups_ == 2)
      graph_->run_on_capture_stream(batches, body);
    else
      body(batches);
    return stats;
  }
  const int64_t step = progress_.step;
  try {
    stats.loss_sum = graph_->capture(std::move(batches), body);
    adamw.note_captured();
  } catch (const c10::OutOfMemoryError&) {
    throw;  // run_main's advice on memory applies
  } catch (const std::exception& e) {
    throw UserError(std::string("train.cuda_graphs: step ") + std::to_string(step) + " could not be captured (" +
                    without_backtrace(e.what()) + "); train.cuda_graphs: off runs every step eagerly");
  }
  if (rank == 0)
    spdlog::info("train.cuda_graphs: step {} captured ({}): later steps of these shapes replay it", step,
                 graph_->shapes());
  return stats;
}

void Trainer::optimizer_step(StepStats& step) {
  parallel_->gradient_sync->finish();
  plan_->finish_gradients(side_values_);
  if (config_.train.clip_grad_norm > 0) plan_->clip_grad_norm(config_.train.clip_grad_norm);
  step.lr = progress_.lr = schedule_->lr_at(progress_.step);
  set_learning_rate(*optimizer_, step.lr);
  optimizer_->step();
  if (parallel_->tables)  // at the schedule's lr, scaled to optim.embeddings_lr
    parallel_->tables->step(config_.optim.embeddings_lr > 0 ? step.lr * config_.optim.embeddings_lr / config_.optim.lr
                                                            : step.lr);
  plan_->after_optimizer_step();
  parallel_->gradient_sync->zero_grad();  // not the optimizer's: the gradients may be views of the sync's buffers
  progress_.step += 1;
}

void Trainer::report_state_memory() {
  state_memory_reported_ = true;
  const TableUpdates* tables = parallel_->tables.get();
  recorder_->report_state_memory(progress_,
                                 plan_->parameter_bytes(parallel_->parameters) + (tables ? tables->parameter_bytes() : 0),
                                 plan_->gradient_bytes(parallel_->parameters),
                                 optimizer_state_bytes(*optimizer_) + (tables ? tables->state_bytes() : 0),
                                 plan_->largest_unit_bytes());
}

void Trainer::after_step() {
  if (config_.eval.every_steps > 0 && progress_.step % config_.eval.every_steps == 0 && task_->size(Split::kEval) > 0)
    run_eval();
  // Note [A checkpoint after its step's evaluation]: a step an evaluation still follows (an epoch's
  // last, before end_epoch's; the run's last, before eval.at_end's) is saved once that evaluation
  // ran. Saved before it, a crash in it resumed past it, and the records never held it.
  if (checkpointer_->due_after_step(progress_.step) && !eval_still_due()) save_checkpoint();
}

void Trainer::end_epoch() {
  ++progress_.epoch;
  progress_.batch_in_epoch = 0;
  bool eval_now = config_.eval.every_epochs > 0 && progress_.epoch % config_.eval.every_epochs == 0;
  if (eval_now && task_->size(Split::kEval) > 0 && last_eval_step_ != progress_.step) run_eval();
  if (checkpointer_->due_after_epoch(progress_.epoch, progress_.step) || saving_deferred()) save_checkpoint();
}

int Trainer::stop_after_checkpoint() {
  // Saved again when an evaluation of a step that has its checkpoint already (the one a resume
  // does first) was cut short: the checkpoint must say it is still to do (Note [An evaluation cut short]).
  const bool eval_pending = eval_interrupted_ && last_eval_step_ == progress_.step;
  if (!checkpointer_->saved_at(progress_.step) || (eval_pending && !saved_eval_pending_)) save_checkpoint();
  try {  // every rank stops here: the report's peak RSS of a stopped run, which must not undo the stop
    recorder_->report_peak_memory(progress_);
  } catch (const std::exception& e) {
    spdlog::warn("the peak memory of this stop is not recorded: {}", e.what());
  }
  recorder_->stopped(progress_, stop_signal(), stop_signal() ? stop_reason() : stop_vote_->reason());
  int sig = stop_signal() ? stop_signal() : SIGTERM;  // a rank that was not signalled follows the vote
  barrier(plan_->world());
  return sig;
}

void Trainer::finish() {
  // The writer's model.pt is progress: a large model's took longer than --stall-timeout, while the
  // other ranks waited silent in the last barrier, and a finished run was stopped as stalled.
  auto pulse = recorder_->run_ends(progress_);
  recorder_->log_last_steps(progress_);  // a loss that is no number stops the run before model.pt
  MetricsRecord measured = parallel_->step->report();  // every rank takes part
  if (!measured.empty()) {
    measured.insert(measured.begin(), {"step", static_cast<double>(progress_.step)});
    recorder_->write_metrics(measured);
  }
  plan_->gather_parameters_for_writer();  // only model.pt's writer holds the model whole
  if (parallel_->tables) parallel_->tables->gather_whole(0, output_dir_of(config_.run));
  if (plan_->writes_checkpoints()) task_->save_model(output_dir_of(config_.run));
  if (parallel_->tables) parallel_->tables->release();
  plan_->release_parameters();
  recorder_->report_peak_memory(progress_);  // after model.pt, which may be the run's peak
  recorder_->finished(progress_);
  // Nobody leaves before every rank is done with collectives and rank 0 has written its files.
  barrier(plan_->world());
}

void Trainer::save_checkpoint() {
  // The write is progress for every rank: the others wait for it here, beating, not silent in the
  // next step's collective, where --stall-timeout would take them for stalled.
  auto pulse = recorder_->pulse(progress_);
  const auto start = std::chrono::steady_clock::now();
  std::vector<torch::Tensor> rank_rng = plan_->gather_checkpoint_state();
  checkpointer_->mark_saved(progress_.step);
  // Note [An evaluation cut short]: a stop that cut this step's evaluation short saves the step with
  // it still to do; the resume does it, so the records hold it whole, once, at its step.
  progress_.eval_pending = saved_eval_pending_ = eval_interrupted_ && last_eval_step_ == progress_.step;
  CheckpointLayout layout = checkpoint_layout(*parallel_, *plan_, task_->model(), config_.checkpoint.format);
  write_checkpoint(*checkpointer_, plan_->world(), layout, task_->model(), *optimizer_, progress_, rank_rng);
  barrier(plan_->world());
  recorder_->checkpoint_written(std::chrono::steady_clock::now() - start);
}

void Trainer::run_eval() {
  recorder_->eval_begins(progress_);
  plan_->share_buffers();
  // Ranks' eval batches differ in count: a forward that gathers parameters block by block runs in
  // lockstep (ParallelPlan::forward_gathers); otherwise what this rank's layers need is gathered once.
  plan_->gather_local_parameters();
  EvalHooks hooks;
  hooks.batch_done = [this](int64_t done, int64_t total) { recorder_->eval_progress(progress_, done, total); };
  hooks.stop_requested = [] { return stop_signal() != 0; };  // within the launcher's grace, not after the split
  EvalResult result = parallel_->step->evaluate(config_.eval, hooks);
  plan_->release_parameters();
  last_eval_step_ = progress_.step;
  // Every rank sees the same sums, so all agree it was cut short, and stop as a vote would.
  eval_interrupted_ = eval_interrupted_ || result.interrupted;
  recorder_->eval_ends(progress_, result);
}

}  // namespace ddp
