#include "ddp/loop/trainer.h"

#include <spdlog/spdlog.h>
#include <signal.h>
#include <sys/resource.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <filesystem>
#include <set>
#include <sstream>

#include "ddp/common/atomic_file.h"
#include "ddp/common/error.h"
#include "ddp/common/text.h"
#include "ddp/common/worker_contract.h"
#include "ddp/comm/collectives.h"
#include "ddp/loop/autocast_scope.h"
#include "ddp/loop/evaluator.h"
#include "ddp/optim/optimizer_factory.h"
#include "ddp/record/run_report.h"
#include "ddp/common/version.h"

namespace ddp {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// "name [shape]" per parameter and buffer: what must agree across ranks besides the config.
std::string parameter_signature(const torch::nn::Module& model) {
  std::ostringstream out;
  for (const auto& item : model.named_parameters()) out << item.key() << " " << item.value().sizes() << "\n";
  for (const auto& item : model.named_buffers()) out << item.key() << " " << item.value().sizes() << "\n";
  return out.str();
}

// DDPRUN_TEST_STEP_DELAY=RANK:MS slows that rank by MS per step: the straggler the monitor's tests need.
double test_step_delay_ms(int rank) {
  const char* value = std::getenv("DDPRUN_TEST_STEP_DELAY");
  if (!value) return 0;
  int which = -1;
  double ms = 0;
  if (std::sscanf(value, "%d:%lf", &which, &ms) != 2 || ms < 0 || ms > 60000)
    throw UserError(std::string("DDPRUN_TEST_STEP_DELAY: expected RANK:MS, got '") + value + "'");
  return which == rank ? ms : 0;
}

std::string format_duration(double seconds) {
  auto total = static_cast<int64_t>(seconds);
  char text[32];
  std::snprintf(text, sizeof text, "%lld:%02lld:%02lld", static_cast<long long>(total / 3600),
                static_cast<long long>(total / 60 % 60), static_cast<long long>(total % 60));
  return text;
}

}  // namespace

Trainer::Trainer(TrainConfig config, DistEnv env) : config_(std::move(config)) {
  output_dir_ = config_.run.output_dir.empty() ? "runs/" + config_.run.name : config_.run.output_dir;
  comm_ = connect(env, config_.dist);
  std::string resolved = to_yaml(config_);
  check_identical_across_ranks(comm_, "config", resolved);
  if (comm_.rank == 0) prepare_output_dir(resolved);

  TaskContext context;
  context.device = comm_.device;
  // One rank sums with itself: the same layers and arithmetic at every world size.
  context.model.cross_rank_sum = [this](const torch::Tensor& values) {
    return comm_.world_size > 1 ? all_reduce_sum(comm_, values) : values;
  };
  context.model.warn = comm_.rank == 0;
  context.full_neighbourhood_eval = config_.eval.full_neighbourhood;
  torch::manual_seed(static_cast<uint64_t>(config_.run.seed));
  task_ = make_task(config_.task, config_.data, config_.sampler, config_.model, config_.loss, context);
  // Once each: a tensor registered under two names (tied weights) must get one gradient slot and
  // one optimizer state; LibTorch's parameters(), unlike Python's, lists it twice.
  std::set<const c10::TensorImpl*> seen;
  for (const auto& p : task_->model().parameters())
    if (seen.insert(p.unsafeGetTensorImpl()).second) parameters_.push_back(p);
  for (const auto& b : task_->model().buffers())
    if (seen.insert(b.unsafeGetTensorImpl()).second) buffers_.push_back(b);
  synchronise_replicas();

  sampler_ = std::make_unique<DistributedSampler>(task_->size(Split::kTrain), comm_.world_size, comm_.rank,
                                                  config_.sampler);
  prefetcher_ = std::make_unique<BatchPrefetcher>(
      [task = task_.get()](const torch::Tensor& indices) { return task->make_batch(Split::kTrain, indices); },
      config_.data, /*pin_memory=*/comm_.device.is_cuda());
  // Side values travel with the gradients (no collective of their own): the stop vote, then the
  // monitor's numbers (Note [Monitor values]).
  monitor_ = std::make_unique<SystemMonitor>(config_.monitor, comm_.rank, comm_.world_size,
                                             comm_.device.is_cuda() ? comm_.device.index() : -1);
  reducer_ = std::make_unique<GradientReducer>(parameters_, comm_, config_.dist, 1 + monitor_->side_values());
  test_step_delay_ms_ = test_step_delay_ms(comm_.rank);
  const char* progress = std::getenv(env::kProgress);
  progress_line_ = comm_.rank == 0 && progress && std::string(progress) == "1";
  double lr = scaled_lr(config_.optim, comm_.world_size);
  optimizer_ = make_optimizer(parameters_, config_.optim, lr);
  total_steps_ = config_.train.epochs * steps_per_epoch();
  if (config_.train.max_steps > 0) total_steps_ = std::min(total_steps_, config_.train.max_steps);
  schedule_ = std::make_unique<LrSchedule>(config_.schedule, lr, total_steps_);
  checkpointer_ = std::make_unique<Checkpointer>(config_.checkpoint, output_dir_ + "/checkpoints");
  resume();
}

void Trainer::prepare_output_dir(const std::string& resolved_config) {
  std::error_code ec;
  std::filesystem::create_directories(output_dir_, ec);
  if (ec) throw_output_error("cannot create run.output_dir " + output_dir_ + ": " + ec.message(), ec.value());
  output_lock_ = std::make_unique<DirectoryLock>(output_dir_, "run.output_dir");
  write_file_atomically(output_dir_ + "/config.yaml", "# " + version_line() + "\n" + resolved_config);
  spdlog::info("resolved config (saved to {}/config.yaml):\n{}", output_dir_, resolved_config);
  spdlog::info("world size {} ({} backend, model on {}), per-rank batch {}, global batch {}", comm_.world_size,
               comm_.backend, comm_.device.str(),
               config_.train.batch_size, config_.train.batch_size * config_.train.grad_accum_steps * comm_.world_size);
  metrics_ = std::make_unique<MetricsLog>(output_dir_ + "/metrics.jsonl",
                                         config_.logging.tensorboard ? output_dir_ + "/tb" : "");
  // Indented: TensorBoard's text tab renders markdown, and this keeps the YAML as it is.
  std::string indented;
  for (const auto& line : split(version_line() + "\n\n" + resolved_config, '\n')) indented += "    " + line + "\n";
  metrics_->write_text("config", 0, indented);
}

void Trainer::synchronise_replicas() {
  // Shapes first: broadcasting into a different architecture would fail obscurely or hang.
  check_identical_across_ranks(comm_, "model parameters", parameter_signature(task_->model()));
  std::vector<torch::Tensor> state = parameters_;
  state.insert(state.end(), buffers_.begin(), buffers_.end());
  broadcast_coalesced(comm_, state, 0);
}

void Trainer::resume() {
  // Note [Resume from rank 0]: rank 0 alone chooses and verifies the checkpoint, reads it, and
  // broadcasts its bytes; every rank loads those. The ranks then resume from the same state even
  // when their nodes hold different files at that path (node-local storage, a stale copy), and
  // no rank but 0 needs the file at all.
  std::string chosen, bytes;
  if (comm_.rank == 0) {
    if (auto found = checkpointer_->find_resume_point()) {
      chosen = checkpoint_at(found->manifest_path).data_path;
      bytes = read_whole_file(chosen);
    }
  }
  broadcast_bytes(comm_, bytes, 0);
  if (bytes.empty()) return;
  std::string source = comm_.rank == 0 ? chosen : "rank 0's checkpoint";
  progress_ = load_checkpoint_bytes(bytes, source, task_->model(), *optimizer_, comm_.world_size, comm_.rank);
  last_eval_step_ = progress_.step;  // evaluated (or not) before that checkpoint was written
  last_saved_step_ = progress_.step;
  if (comm_.rank == 0)
    spdlog::info("resumed from {} at step {} (epoch {}, batch {})", chosen, progress_.step, progress_.epoch,
                 progress_.batch_in_epoch);
}

int64_t Trainer::steps_per_epoch() const {
  return ceil_div(ceil_div(sampler_->num_samples(), config_.train.batch_size), config_.train.grad_accum_steps);
}

bool Trainer::done() const {
  return progress_.epoch >= config_.train.epochs ||
         (config_.train.max_steps > 0 && progress_.step >= config_.train.max_steps);
}

int Trainer::fit() {
  install_stop_handlers();
  heartbeat_.beat(progress_.step);
  fit_start_ = window_.start = Clock::now();
  fit_start_step_ = progress_.step;
  task_->model().train();
  bool has_eval = task_->size(Split::kEval) > 0;
  if (config_.eval.at_start && progress_.step == 0 && has_eval) run_eval();

  while (!done() && !stop_agreed_) {
    sampler_->set_epoch(progress_.epoch);
    task_->set_epoch(progress_.epoch);
    torch::Tensor indices = sampler_->indices();
    int64_t batches = ceil_div(indices.size(0), config_.train.batch_size);
    prefetcher_->start(indices, config_.train.batch_size, progress_.batch_in_epoch);
    while (progress_.batch_in_epoch < batches && !done() && !stop_agreed_) {
      train_step(std::min(config_.train.grad_accum_steps, batches - progress_.batch_in_epoch));
      after_step();
    }
    if (progress_.batch_in_epoch >= batches) end_epoch();
  }
  if (stop_agreed_) return stop_after_checkpoint();
  if (has_eval && last_eval_step_ != progress_.step) run_eval();
  finish();
  return 0;
}

void Trainer::train_step(int64_t micro_batches) {
  auto step_start = Clock::now();
  double data_wait_ms = 0;
  if (test_step_delay_ms_ > 0)
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(test_step_delay_ms_));
  for (int64_t m = 0; m < micro_batches; ++m) {
    // Only the last micro-step's backward communicates (the buckets start during it); this
    // rank's stop vote and its monitor numbers travel with it.
    if (m + 1 == micro_batches) {
      std::vector<double> side{stop_signal() != 0 ? 1.0 : 0.0};
      auto mine = monitor_->local_values(last_data_wait_ms_, last_busy_ms_);
      side.insert(side.end(), mine.begin(), mine.end());
      reducer_->prepare(side);
    }
    auto wait_start = Clock::now();
    Batch next = prefetcher_->next();
    data_wait_ms += seconds_since(wait_start) * 1000;
    Batch batch = next.to(comm_.device);
    torch::Tensor loss;
    {
      AutocastScope autocast(comm_.device, mixed_precision());
      loss = task_->loss(batch);
    }
    // Micro-steps average, like one batch micro_batches times as large.
    (loss / static_cast<double>(micro_batches)).backward();
    window_.loss += loss.item<double>();
    window_.batches += 1;
    window_.samples += batch.size();
    window_.sampled_edges += batch.sampled_edges;
    progress_.batch_in_epoch += 1;
  }
  // Every rank sees the same votes, so every rank stops after the same step.
  std::vector<double> side = reducer_->finish();
  stop_agreed_ = side[0] > 0;
  monitor_->add(side, 1);
  window_.allreduce_ms += reducer_->timing().total_ms;
  window_.exposed_ms += reducer_->timing().exposed_ms;
  if (config_.train.clip_grad_norm > 0) torch::nn::utils::clip_grad_norm_(parameters_, config_.train.clip_grad_norm);
  set_learning_rate(*optimizer_, schedule_->lr_at(progress_.step));
  optimizer_->step();
  reducer_->zero_grad();  // the gradients are views of the reducer's buckets
  progress_.step += 1;
  window_.steps += 1;
  if (progress_.step == fit_start_step_ + 1 && comm_.rank == 0) {
    // For the benchmark's "launch to first finished step".
    double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    metrics_->write({{"step", static_cast<double>(progress_.step)}, {"first_step_unix_s", now}});
  }
  comm_.tracker->set_step(progress_.step);
  heartbeat_.beat(progress_.step);
  last_data_wait_ms_ = data_wait_ms;
  last_busy_ms_ = std::max(0.0, seconds_since(step_start) * 1000 - data_wait_ms - reducer_->timing().exposed_ms);
  if (comm_.rank == 0)
    if (auto record = monitor_->record_if_due(progress_.step)) metrics_->write(*record);
}

void Trainer::after_step() {
  int64_t step = progress_.step;
  if (progress_line_) show_progress_line();
  if (config_.train.log_every > 0 && step % config_.train.log_every == 0) log_progress();
  if (config_.eval.every_steps > 0 && step % config_.eval.every_steps == 0 && task_->size(Split::kEval) > 0)
    run_eval();
  if (config_.checkpoint.every_steps > 0 && step % config_.checkpoint.every_steps == 0) save_checkpoint();
}

void Trainer::end_epoch() {
  ++progress_.epoch;
  progress_.batch_in_epoch = 0;
  bool eval_now = config_.eval.every_epochs > 0 && progress_.epoch % config_.eval.every_epochs == 0;
  if (eval_now && task_->size(Split::kEval) > 0 && last_eval_step_ != progress_.step) run_eval();
  bool save_now = config_.checkpoint.every_epochs > 0 && progress_.epoch % config_.checkpoint.every_epochs == 0;
  if (save_now && last_saved_step_ != progress_.step) save_checkpoint();
}

int Trainer::stop_after_checkpoint() {
  if (last_saved_step_ != progress_.step) save_checkpoint();
  int sig = stop_signal() ? stop_signal() : SIGTERM;  // a rank that was not signalled follows the vote
  if (comm_.rank == 0)
    spdlog::warn("stopping at step {} as asked ({}); checkpoint saved, the same command resumes from it",
                 progress_.step, sig == SIGINT ? "SIGINT" : sig == SIGHUP ? "SIGHUP" : "SIGTERM");
  write_report(128 + sig);
  barrier(comm_);
  return sig;
}

void Trainer::finish() {
  report_peak_memory();
  if (comm_.rank == 0) {
    task_->save_model(output_dir_);
    double elapsed = seconds_since(fit_start_);
    int64_t steps = progress_.step - fit_start_step_;
    spdlog::info("done: {} steps in {:.1f} s ({:.1f} steps/s); model weights in {}/model.pt", steps, elapsed,
                 steps / std::max(elapsed, 1e-9), output_dir_);
  }
  write_report(0);
  // Nobody leaves before every rank is done with collectives and rank 0 has written its files.
  barrier(comm_);
}

void Trainer::report_peak_memory() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto per_rank = torch::zeros({comm_.world_size}, torch::kDouble);
  per_rank[comm_.rank] = static_cast<double>(usage.ru_maxrss) / 1024.0;  // KiB → MiB
  per_rank = all_reduce_sum(comm_, per_rank);
  if (comm_.rank != 0) return;
  std::string text;
  MetricsRecord record{{"step", static_cast<double>(progress_.step)},
                       {"peak_rss_mib_max", per_rank.max().item<double>()}};
  for (int r = 0; r < comm_.world_size; ++r) {
    text += fmt::format("{}{:.0f}", r ? ", " : "", per_rank[r].item<double>());
    record.emplace_back("peak_rss_mib_rank" + std::to_string(r), per_rank[r].item<double>());
  }
  spdlog::info("peak RSS per rank (MiB): {}", text);
  metrics_->write(record);
}

void Trainer::write_report(std::optional<int> exit_status) {
  if (comm_.rank != 0) return;
  if (exit_status)
    metrics_->write({{"step", static_cast<double>(progress_.step)}, {"exit_status", static_cast<double>(*exit_status)}});
  if (!config_.logging.report) return;
  try {
    write_run_report(output_dir_ + "/report.html", {output_dir_});
  } catch (const std::exception& e) {
    spdlog::warn("no report.html: {}", e.what());  // the run's own files are what matter
  }
}

void Trainer::save_checkpoint() {
  last_saved_step_ = progress_.step;
  // Every rank's generator: ranks draw different amounts (dropout on batches of different sizes),
  // and each must resume from its own state for the run to continue exactly.
  torch::Tensor mine = at::detail::getDefaultCPUGenerator().get_state();
  auto all = torch::zeros({comm_.world_size, mine.numel()}, torch::kDouble);
  all[comm_.rank].copy_(mine.to(torch::kDouble));
  all = all_reduce_sum(comm_, all);
  if (comm_.rank != 0) return;
  std::vector<torch::Tensor> rank_rng;
  for (int r = 0; r < comm_.world_size; ++r) rank_rng.push_back(all[r].to(mine.scalar_type()).contiguous());
  checkpointer_->save(task_->model(), *optimizer_, progress_, comm_.world_size, rank_rng);
}

void Trainer::log_progress() {
  // Every rank reaches the same log steps, so this small all-reduce is matched everywhere.
  const LogWindow& w = window_;
  auto sums = all_reduce_sum(comm_, torch::tensor({w.loss, static_cast<double>(w.batches),
                                                   static_cast<double>(w.samples), w.allreduce_ms, w.exposed_ms,
                                                   static_cast<double>(w.steps), static_cast<double>(w.sampled_edges)},
                                                  torch::kDouble));
  double elapsed = std::max(seconds_since(w.start), 1e-9);
  double loss = sums[0].item<double>() / std::max(1.0, sums[1].item<double>());
  double samples_per_s = sums[2].item<double>() / elapsed;
  double lr = schedule_->lr_at(progress_.step - 1);
  // Per step and rank: all-reduce time, and the part of it backward did not hide.
  double rank_steps = std::max(1.0, sums[5].item<double>());
  double allreduce_ms = sums[3].item<double>() / rank_steps;
  double exposed_ms = sums[4].item<double>() / rank_steps;
  double edges_per_s = sums[6].item<double>() / elapsed;
  if (comm_.rank == 0) {
    double steps_done = static_cast<double>(progress_.step - fit_start_step_);
    double eta = seconds_since(fit_start_) / std::max(1.0, steps_done) * (total_steps_ - progress_.step);
    std::string edges = edges_per_s > 0 ? fmt::format(" sampled edges/s {:.0f}", edges_per_s) : "";
    spdlog::info("epoch {} step {}/{} loss {:.4f} lr {:.3g} samples/s {:.0f} ({:.0f} per rank){} all-reduce {:.2f} ms "
                 "({:.2f} ms exposed) ETA {}",
                 progress_.epoch, progress_.step, total_steps_, loss, lr, samples_per_s,
                 samples_per_s / comm_.world_size, edges, allreduce_ms, exposed_ms, format_duration(eta));
    MetricsRecord record{{"step", static_cast<double>(progress_.step)},
                                                        {"epoch", static_cast<double>(progress_.epoch)},
                                                        {"loss", loss},
                                                        {"lr", lr},
                                                        {"samples_per_s", samples_per_s},
                                                        {"samples_per_s_per_rank", samples_per_s / comm_.world_size},
                                                        {"allreduce_ms", allreduce_ms},
                                                        {"allreduce_exposed_ms", exposed_ms}};
    if (edges_per_s > 0) record.emplace_back("sampled_edges_per_s", edges_per_s);
    metrics_->write(record);
  }
  window_ = LogWindow{};
}

void Trainer::show_progress_line() {
  auto now = Clock::now();
  if (now - last_progress_line_ < std::chrono::milliseconds(250)) return;
  last_progress_line_ = now;
  double elapsed = std::max(seconds_since(window_.start), 1e-9);
  double steps_done = static_cast<double>(progress_.step - fit_start_step_);
  double eta = seconds_since(fit_start_) / std::max(1.0, steps_done) * static_cast<double>(total_steps_ - progress_.step);
  std::string line = fmt::format("{}epoch {} step {}/{} | {:.0f} samples/s | ETA {}\n", kProgressMarker, progress_.epoch, progress_.step,
                                 total_steps_, window_.samples * comm_.world_size / elapsed, format_duration(eta));
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
}

void Trainer::run_eval() {
  auto eval_start = Clock::now();
  heartbeat_.beat(progress_.step);
  // Note [Lazy buffer broadcast]: DDP copies rank 0's buffers (BatchNorm running statistics) to
  // every rank before each forward. In training mode nothing reads them, and rank 0's own never
  // depend on the other ranks', so copying them only when they are read (here; rank 0 writes
  // checkpoints and model.pt from its own) gives exactly DDP's values, without a collective per step.
  if (!buffers_.empty() && comm_.world_size > 1) broadcast_coalesced(comm_, buffers_, 0);
  EvalResult result;
  {
    AutocastScope autocast(comm_.device, mixed_precision());
    result = evaluate(*task_, config_.eval, comm_);
  }
  last_eval_step_ = progress_.step;
  heartbeat_.beat(progress_.step);
  window_.start += Clock::now() - eval_start;  // throughput counts training time only
  if (comm_.rank != 0) return;
  std::string values;
  MetricsRecord record{{"step", static_cast<double>(progress_.step)}, {"epoch", static_cast<double>(progress_.epoch)}};
  for (const auto& [name, value] : result.metrics) {
    values += fmt::format(" {} {:.4f}", name, value);
    record.emplace_back("eval_" + name, value);
  }
  record.emplace_back("eval_samples", static_cast<double>(result.samples));
  spdlog::info("eval at step {} (epoch {}):{} over {} samples", progress_.step, progress_.epoch, values,
               result.samples);
  metrics_->write(record);
  write_report(std::nullopt);
}

}  // namespace ddp
