#include "ddp/loop/run_recorder.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "ddp/comm/collectives.h"
#include "ddp/common/atomic_file.h"
#include "ddp/common/error.h"
#include "ddp/common/made_directories.h"
#include "ddp/common/text.h"
#include "ddp/common/version.h"
#include "ddp/common/worker_contract.h"
#include "ddp/loop/memory_in_use.h"
#include "ddp/record/run_report.h"

namespace ddp {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Test hooks: DDPRUN_TEST_STEP_DELAY=RANK:MS slows that rank by MS per step (the straggler the
// monitor's tests need), DDPRUN_TEST_EVAL_DELAY=RANK:MS each evaluation (a long one, for the stall check's),
// DDPRUN_TEST_END_DELAY=RANK:MS the run's end (a slow model.pt, for the stall check's too).
double test_delay_ms(const char* variable, int rank) {
  const char* value = std::getenv(variable);
  if (!value) return 0;
  int which = -1;
  double ms = 0;
  if (std::sscanf(value, "%d:%lf", &which, &ms) != 2 || ms < 0 || ms > 60000)
    throw UserError(std::string(variable) + ": expected RANK:MS, got '" + value + "'");
  return which == rank ? ms : 0;
}

// DDPRUN_TEST_FAIL_AT_STEP=RANK:STEP: the step at which rank RANK throws, for the tests of a
// failing rank; -1 for the others, and when unset.
int64_t test_fail_step(int rank) {
  const char* value = std::getenv("DDPRUN_TEST_FAIL_AT_STEP");
  if (!value) return -1;
  int which = -1;
  long long step = -1;
  if (std::sscanf(value, "%d:%lld", &which, &step) != 2 || step < 0)
    throw UserError(std::string("DDPRUN_TEST_FAIL_AT_STEP: expected RANK:STEP, got '") + value + "'");
  return which == rank ? step : -1;
}

void sleep_ms(double ms) {
  if (ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
}

std::string format_duration(double seconds) {
  auto total = static_cast<int64_t>(seconds);
  char text[32];
  std::snprintf(text, sizeof text, "%lld:%02lld:%02lld", static_cast<long long>(total / 3600),
                static_cast<long long>(total / 60 % 60), static_cast<long long>(total % 60));
  return text;
}

MetricsRecord at_step(const TrainProgress& progress) { return {{"step", static_cast<double>(progress.step)}}; }

// Why a run stops, after "stopping at step N": a signal to this rank (0: another rank's, which
// the vote spread), and the reason its launcher, or the voters', gave.
std::string stop_text(int signal, StopReason reason) {
  const std::string resumes = "; checkpoint saved, the same command resumes from it";
  switch (reason) {
    case StopReason::kMembershipChanged:
      // The next round resumes; a node that is left out (it was frozen, or the job cannot go on) ends.
      return ": the job's nodes changed, and the launcher ends this round; checkpoint saved, the next round resumes "
             "from it, or where the job ends here, the same command resumes from it";
    case StopReason::kPeerFailed:
      return ": another rank failed, and the launcher stops the others; checkpoint saved";
    case StopReason::kPeerInterrupted:
      return ": another node was interrupted, and the launcher stops this one too" + resumes;
    case StopReason::kAsked:
      break;
  }
  if (signal == 0) return ": another rank was asked to stop, and every rank stops with it" + resumes;
  const char* name = signal == SIGINT    ? "SIGINT"
                     : signal == SIGHUP  ? "SIGHUP"
                     : signal == SIGQUIT ? "SIGQUIT"
                     : signal == SIGUSR1 ? "SIGUSR1"
                     : signal == SIGUSR2 ? "SIGUSR2"
                                         : "SIGTERM";
  return std::string(" as asked (") + name + ")" + resumes;
}

}  // namespace

RunRecorder::LogWindow::LogWindow(ValueSlots& sums)
    : loss(sums.reserve("loss")),
      batches(sums.reserve("batches")),
      samples(sums.reserve("samples")),
      sampled_edges(sums.reserve("sampled edges")),
      tokens(sums.reserve("tokens")),
      steps(sums.reserve("steps")),
      sync_ms(sums.reserve("gradient sync ms")),
      exposed_ms(sums.reserve("exposed gradient sync ms")) {}

RunRecorder::RunRecorder(const TrainConfig& config, const Communicator& world, const std::string& output_dir,
                         const std::string& resolved_config, ValueSlots& side_values,
                         const std::string& batch_formation, int64_t samples_per_step)
    : config_(config),
      world_(world),
      output_dir_(output_dir),
      resolved_config_(resolved_config),
      monitor_(config.monitor, world.rank, world.world_size, world.device.is_cuda() ? world.device.index() : -1,
               side_values, std::max(1, rank_threads(config.dist))),
      test_step_delay_ms_(test_delay_ms("DDPRUN_TEST_STEP_DELAY", world.rank)),
      test_eval_delay_ms_(test_delay_ms("DDPRUN_TEST_EVAL_DELAY", world.rank)),
      test_fail_step_(test_fail_step(world.rank)),
      test_eval_batch_delay_ms_(test_delay_ms("DDPRUN_TEST_EVAL_BATCH_DELAY", world.rank)),
      test_end_delay_ms_(test_delay_ms("DDPRUN_TEST_END_DELAY", world.rank)),
      samples_per_step_(samples_per_step) {
  const char* progress = std::getenv(env::kProgress);
  progress_line_ = world_.rank == 0 && progress && std::string(progress) == "1";
  if (world_.rank != 0) return;
  std::error_code ec;
  created_dir_ = first_missing_directory(output_dir_);
  std::filesystem::create_directories(output_dir_, ec);
  if (ec) throw_output_error("cannot create run.output_dir " + output_dir_ + ": " + ec.message(), ec.value());
  output_lock_ = std::make_unique<DirectoryLock>(output_dir_, "run.output_dir");
  const int threads = torch::get_num_threads();
  spdlog::info("world size {} ({} backend, model on {}, {} thread{} a rank); {}", world_.world_size, world_.backend,
               world_.device.str(), threads, threads == 1 ? "" : "s", batch_formation);
}

RunRecorder::~RunRecorder() {
  if (std::uncaught_exceptions() > 0) remove_unstepped_directory();
}

void RunRecorder::remove_unstepped_directory() {
  if (world_.rank != 0 || created_dir_.empty() || stepped_) return;
  metrics_.reset();
  output_lock_.reset();
  // Its own directory, then the parents it made while they are empty: another run may have begun in one.
  std::error_code ec;
  std::filesystem::remove_all(output_dir_, ec);
  remove_made_parents(output_dir_, created_dir_);
}

void RunRecorder::begin(const TrainProgress& progress, int64_t total_steps, int64_t total_epochs) {
  // Only now, once the run has resumed or started: a run refused before its first step leaves the
  // directory as it was (Note [Re-running a run]): the config, metrics and events of the run whose
  // checkpoints it holds.
  if (world_.rank == 0) {
    write_file_atomically(output_dir_ + "/config.yaml", "# " + version_line() + "\n" + resolved_config_);
    // Every key is in the file, and `ddp-train CONFIG --print-config` prints them: the console keeps
    // to what the run is doing.
    spdlog::info("resolved config saved to {}/config.yaml", output_dir_);
    metrics_ = std::make_unique<MetricsLog>(output_dir_ + "/metrics.jsonl",
                                            config_.logging.tensorboard ? output_dir_ + "/tb" : "");
    // Indented: TensorBoard's text tab renders markdown, and this keeps the YAML as it is.
    std::string indented;
    for (const auto& line : split(version_line() + "\n\n" + resolved_config_, '\n')) indented += "    " + line + "\n";
    metrics_->write_text("config", 0, indented);
  }
  heartbeat_.beat(progress.step);
  monitor_.start();
  run_start_ = window_start_ = Clock::now();
  run_start_step_ = window_from_step_ = progress.step;
  total_steps_ = total_steps;
  total_epochs_ = total_epochs;
}

void RunRecorder::step_begins(const TrainProgress& progress) {
  step_start_ = Clock::now();
  // The first step sets up what the others reuse (allocations, a cache, the prefetch queue).
  if (progress.step == run_start_step_) first_step_pulse_ = pulse(progress);
  sleep_ms(test_step_delay_ms_);
  if (progress.step == test_fail_step_)
    throw std::runtime_error("DDPRUN_TEST_FAIL_AT_STEP: failing at step " + std::to_string(progress.step) + ", as asked");
  monitor_.put_local(last_data_wait_ms_, last_busy_ms_);
  host_reads_.step_begins();
}

std::unique_ptr<HeartbeatPulse> RunRecorder::pulse(const TrainProgress& progress) const {
  return std::make_unique<HeartbeatPulse>(heartbeat_, progress.step);
}

std::unique_ptr<HeartbeatPulse> RunRecorder::run_ends(const TrainProgress& progress) const {
  auto beating = pulse(progress);
  sleep_ms(test_end_delay_ms_);
  return beating;
}

void RunRecorder::step_ends(const TrainProgress& progress, const StepStats& step, double data_waited_ms,
                            const ReducerTiming& sync) {
  host_reads_.step_ends();
  first_step_pulse_.reset();
  if (eta_from_step_ < 0) {
    eta_from_ = Clock::now();
    eta_from_step_ = progress.step;
    first_step_s_ = seconds_since(step_start_);
  }
  stepped_ = true;
  monitor_.take_summed();
  if (step.loss_sum.defined())
    window_loss_ = window_loss_.defined() ? window_loss_ + step.loss_sum : step.loss_sum;
  window_sums_.value(window_.batches) += static_cast<double>(step.batches);
  window_sums_.value(window_.samples) += static_cast<double>(step.samples);
  window_sums_.value(window_.sampled_edges) += static_cast<double>(step.sampled_edges);
  window_sums_.value(window_.tokens) += static_cast<double>(step.tokens);
  window_sums_.value(window_.steps) += 1;
  window_sums_.value(window_.sync_ms) += sync.total_ms;
  window_sums_.value(window_.exposed_ms) += sync.exposed_ms;
  last_lr_ = step.lr;
  if (progress.step == run_start_step_ + 1 && world_.rank == 0) {
    // For the benchmark's "launch to first finished step".
    double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    metrics_->write({{"step", static_cast<double>(progress.step)}, {"first_step_unix_s", now}});
  }
  world_.tracker->set_step(progress.step);
  heartbeat_.beat(progress.step);
  last_data_wait_ms_ = data_waited_ms - data_waited_ms_;
  data_waited_ms_ = data_waited_ms;
  const double step_ms = seconds_since(step_start_) * 1000;
  last_busy_ms_ = std::max(0.0, step_ms - last_data_wait_ms_ - sync.exposed_ms);
  monitor_.note_step_time(step_ms);
  if (world_.rank == 0)
    if (auto record = monitor_.record_if_due(progress.step)) metrics_->write(*record);
  if (progress_line_) show_progress_line(progress);
  if (config_.train.log_every > 0 && progress.step % config_.train.log_every == 0) log_window(progress);
}

// Note [ETA]: the remaining steps at the pace of the steps after this run's first, evaluations left
// out; until a second step ends, at the first step's. Counting from the run's start instead put the
// evaluation before training and the first step's warm-up into every step, and gave 0:09:20 for an 18 s run.
double RunRecorder::eta_seconds(const TrainProgress& progress) const {
  double remaining = static_cast<double>(total_steps_ - progress.step);
  double steps = static_cast<double>(progress.step - eta_from_step_);
  if (eta_from_step_ < 0 || steps < 1) return first_step_s_ * remaining;
  return seconds_since(eta_from_) / steps * remaining;
}

void RunRecorder::log_window(const TrainProgress& progress) {
  if (window_loss_.defined()) window_sums_.value(window_.loss) = window_loss_.item<double>();  // the window's one read
  window_loss_ = torch::Tensor();
  // Every rank reaches the same log steps, so this small all-reduce is matched everywhere.
  auto sums = all_reduce_sum(world_, torch::tensor(window_sums_.packed(), torch::kDouble)).contiguous();
  std::copy(sums.data_ptr<double>(), sums.data_ptr<double>() + sums.numel(), window_sums_.packed().begin());
  const ValueSlots& total = window_sums_;
  double elapsed = std::max(seconds_since(window_start_), 1e-9);
  double loss = total.value(window_.loss) / std::max(1.0, total.value(window_.samples));  // a per-sample mean
  // A loss that is no number ends the run, on every rank alike (they summed the same): each later
  // step would train NaN weights, and a restart would resume, bit-identically, into the same.
  // Its record goes first: the report and metrics.jsonl show the divergence, not a run that stopped.
  if (!std::isfinite(loss)) {
    if (world_.rank == 0 && metrics_)
      metrics_->write({{"step", static_cast<double>(progress.step)},
                       {"epoch", static_cast<double>(epoch_of(progress))},
                       {"loss", loss}});
    throw UserError("the training loss over steps " + std::to_string(window_from_step_ + 1) + "-" +
                    std::to_string(progress.step) + " is " +
                    (std::isnan(loss) ? "nan"
                     : loss > 0       ? "inf"
                                      : "-inf") +
                    ": training diverged (too high an optim.lr, no train.clip_grad_norm, or broken starting "
                    "weights); stopped without saving model.pt" +
                    // Named only where one was saved: every rank saves alike, so the words match
                    // (Note [One usage error]).
                    (saved_in_window_ ? ", and a checkpoint after step " + std::to_string(window_from_step_) +
                                            " may hold diverged weights"
                                      : ""));
  }
  window_from_step_ = progress.step;
  saved_in_window_ = false;
  double samples_per_s = total.value(window_.samples) / elapsed;
  // Per step and rank: gradient sync time, and the part of it backward did not hide.
  double rank_steps = std::max(1.0, total.value(window_.steps));
  double allreduce_ms = total.value(window_.sync_ms) / rank_steps;
  double exposed_ms = total.value(window_.exposed_ms) / rank_steps;
  double edges_per_s = total.value(window_.sampled_edges) / elapsed;
  double tokens_per_s = total.value(window_.tokens) / elapsed;
  window_sums_.clear();
  window_start_ = Clock::now();
  if (world_.rank != 0) return;
  double lr = last_lr_;
  std::string rates = edges_per_s > 0 ? fmt::format(" sampled edges/s {:.0f}", edges_per_s) : "";
  if (tokens_per_s > 0) rates += fmt::format(" tokens/s {:.0f}", tokens_per_s);
  // One rank, or one replica per pipeline stage, syncs nothing: no all-reduce time to show or record.
  const bool synced = world_.world_size > 1 && allreduce_ms > 0;
  if (synced) rates += fmt::format(" all-reduce {:.2f} ms ({:.2f} ms exposed)", allreduce_ms, exposed_ms);
  spdlog::info("epoch {}/{} step {}/{} loss {:.4f} lr {:.3g} samples/s {:.0f} ({:.0f} per rank){} ETA {}",
               epoch_of(progress), total_epochs_, progress.step, total_steps_, loss, lr, samples_per_s,
               samples_per_s / world_.world_size, rates, format_duration(eta_seconds(progress)));
  MetricsRecord record{{"step", static_cast<double>(progress.step)},
                       {"epoch", static_cast<double>(epoch_of(progress))},
                       {"loss", loss},
                       {"lr", lr},
                       {"samples_per_s", samples_per_s},
                       {"samples_per_s_per_rank", samples_per_s / world_.world_size}};
  if (synced) record.insert(record.end(), {{"allreduce_ms", allreduce_ms}, {"allreduce_exposed_ms", exposed_ms}});
  if (edges_per_s > 0) record.emplace_back("sampled_edges_per_s", edges_per_s);
  if (tokens_per_s > 0) record.emplace_back("tokens_per_s", tokens_per_s);
  metrics_->write(record);
}

void RunRecorder::show_progress_line(const TrainProgress& progress) {
  auto now = Clock::now();
  if (now - last_progress_line_ < std::chrono::milliseconds(250)) return;
  last_progress_line_ = now;
  // From the steps and the global batch: rank 0's own count of samples is none in a pipeline's
  // first stage (the last one counts them) and one tensor group's under tensor parallelism.
  const int64_t steps = progress.step - window_from_step_;
  if (steps > 0)
    progress_pace_ = static_cast<double>(steps * samples_per_step_) / std::max(seconds_since(window_start_), 1e-9);
  std::string line =
      fmt::format("{}epoch {}/{} step {}/{} | {:.0f} samples/s | ETA {}\n", kProgressMarker, epoch_of(progress),
                  total_epochs_, progress.step, total_steps_, progress_pace_, format_duration(eta_seconds(progress)));
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
}

void RunRecorder::eval_begins(const TrainProgress& progress) {
  eval_start_ = Clock::now();
  if (progress_line_) {  // the line says what the run does now, not the last step's pace
    std::string line = fmt::format("{}step {}/{} | evaluating {}\n", kProgressMarker, progress.step, total_steps_,
                                   epoch_text(progress));
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fflush(stdout);
    last_progress_line_ = eval_start_;
  }
  last_eval_log_ = eval_start_;
  eval_pulse_ = pulse(progress);
  sleep_ms(test_eval_delay_ms_);
}

void RunRecorder::eval_progress(const TrainProgress& progress, int64_t done, int64_t total) {
  sleep_ms(test_eval_batch_delay_ms_);
  if (world_.rank != 0) return;
  auto now = Clock::now();
  const double elapsed = std::chrono::duration<double>(now - eval_start_).count();
  const double eta = done > 0 ? elapsed / static_cast<double>(done) * static_cast<double>(total - done) : 0;
  if (progress_line_) {
    if (now - last_progress_line_ < std::chrono::milliseconds(250)) return;
    last_progress_line_ = now;
    std::string line = fmt::format("{}step {}/{} | evaluating {}: batch {}/{} | ETA {}\n", kProgressMarker,
                                   progress.step, total_steps_, epoch_text(progress), done, total,
                                   format_duration(eta));
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fflush(stdout);
  } else if (now - last_eval_log_ >= kEvalLogInterval) {
    last_eval_log_ = now;  // in a pipe or a log file, a sign of life that says how far
    spdlog::info("evaluating at step {} ({}): batch {}/{} of rank 0's, ETA {}", progress.step, epoch_text(progress),
                 done, total, format_duration(eta));
  }
}

void RunRecorder::checkpoint_written(Clock::duration took) {
  window_start_ += took;
  saved_in_window_ = true;
}

void RunRecorder::eval_ends(const TrainProgress& progress, const EvalResult& result) {
  eval_pulse_.reset();
  heartbeat_.beat(progress.step);
  window_start_ += Clock::now() - eval_start_;  // throughput counts training time only
  eval_seconds_ += seconds_since(eval_start_);
  if (eta_from_step_ >= 0) eta_from_ += Clock::now() - eval_start_;
  if (world_.rank != 0) return;
  std::string values;
  MetricsRecord record{{"step", static_cast<double>(progress.step)}, {"epoch", static_cast<double>(epoch_of(progress))}};
  for (const auto& [name, value] : result.metrics) {
    values += fmt::format(" {} {:.4f}", name, value);
    record.emplace_back("eval_" + name, value);
  }
  record.emplace_back("eval_samples", static_cast<double>(result.samples));
  if (result.interrupted) {
    record.emplace_back("eval_interrupted", 1);
    if (result.samples == 0)
      spdlog::warn("eval at step {} ({}) interrupted before its first batch", progress.step, epoch_text(progress));
    else
      spdlog::warn("eval at step {} ({}) interrupted after {} of its {} samples:{} over those", progress.step,
                   epoch_text(progress), result.samples, result.planned, values);
  } else {
    spdlog::info("eval at step {} ({}):{} over {} samples", progress.step, epoch_text(progress), values,
                 result.samples);
  }
  metrics_->write(record);
  write_report(progress, std::nullopt);
  // The line said "evaluating": redrawn now, not at the next step (a checkpoint's write, or the
  // run's end with its model.pt, went on under "evaluating").
  last_progress_line_ = {};
  if (progress_line_) show_progress_line(progress);
}

namespace {

// VmPeak from /proc/self/status, in MiB; 0 where there is none.
double peak_address_space_mib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmPeak:", 0) == 0) return std::stod(line.substr(7)) / 1024.0;  // "VmPeak:  123 kB"
  return 0;
}

// This rank's peak RSS in MiB: its process's, or for rank threads (Note [Ranks as threads]) their
// share of it, as the monitor records theirs, so that a process's ranks add up to it.
double peak_rss_mib(const DistConfig& dist) {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0 / std::max(1, rank_threads(dist));  // KiB → MiB
}

}  // namespace

void RunRecorder::report_setup_memory() {
  auto per_rank = torch::zeros({world_.world_size}, torch::kDouble);
  per_rank[world_.rank] = peak_rss_mib(config_.dist);
  per_rank = all_reduce_sum(world_, per_rank);
  if (world_.rank != 0) return;
  std::string text;
  setup_memory_ = {{"setup_peak_rss_mib_max", per_rank.max().item<double>()}};
  for (int r = 0; r < world_.world_size; ++r) {
    text += fmt::format("{}{:.0f}", r ? ", " : "", per_rank[r].item<double>());
    setup_memory_.emplace_back("setup_peak_rss_mib_rank" + std::to_string(r), per_rank[r].item<double>());
  }
  spdlog::info("peak RSS per rank with the model built and placed (MiB): {}", text);
}

void RunRecorder::report_peak_memory(const TrainProgress& progress) {
  auto all = torch::zeros({3, world_.world_size}, torch::kDouble);
  all[0][world_.rank] = peak_rss_mib(config_.dist);
  all[1][world_.rank] = peak_address_space_mib();  // what a ulimit -v (RLIMIT_AS) caps
  all[2][world_.rank] = static_cast<double>(peak_memory_in_use(world_.device)) / (1024.0 * 1024.0);  // < 0: a CPU's
  all = all_reduce_sum(world_, all);
  if (world_.rank != 0) return;
  report_peak_device_memory(progress, all[2]);
  auto per_rank = all[0];
  std::string text;
  MetricsRecord record = at_step(progress);
  record.emplace_back("peak_rss_mib_max", per_rank.max().item<double>());
  record.emplace_back("peak_address_space_mib_max", all[1].max().item<double>());
  for (int r = 0; r < world_.world_size; ++r) {
    text += fmt::format("{}{:.0f}", r ? ", " : "", per_rank[r].item<double>());
    record.emplace_back("peak_rss_mib_rank" + std::to_string(r), per_rank[r].item<double>());
  }
  record.insert(record.end(), setup_memory_.begin(), setup_memory_.end());  // measured before metrics.jsonl was
  metrics_->write(record);
  // Rank threads share their process's memory (Note [Ranks as threads]): one number a process.
  if (const int threads = rank_threads(config_.dist); threads > 0) {
    text.clear();
    for (int r = 0; r < world_.world_size; r += threads)
      text += fmt::format("{}{:.0f}", r ? ", " : "", per_rank.narrow(0, r, threads).sum().item<double>());
    spdlog::info("peak RSS per process of {} rank threads (MiB): {}", threads, text);
    return;
  }
  spdlog::info("peak RSS per rank (MiB): {}", text);
}

void RunRecorder::report_peak_device_memory(const TrainProgress& progress, const torch::Tensor& per_rank_mib) {
  if (per_rank_mib.max().item<double>() < 0) return;  // no rank on a GPU
  std::string text;
  MetricsRecord record = at_step(progress);
  record.emplace_back("peak_cuda_mib_max", per_rank_mib.max().item<double>());
  for (int r = 0; r < world_.world_size; ++r) {
    const double mib = per_rank_mib[r].item<double>();
    text += r ? ", " : "";
    text += mib < 0 ? "(CPU)" : fmt::format("{:.0f}", mib);
    if (mib >= 0) record.emplace_back("peak_cuda_mib_rank" + std::to_string(r), mib);
  }
  metrics_->write(record);
  spdlog::info("peak CUDA memory per rank (MiB, the most the caching allocator had handed out): {}", text);
}

void RunRecorder::report_state_memory(const TrainProgress& progress, int64_t parameter_bytes, int64_t gradient_bytes,
                                      int64_t optimizer_bytes, int64_t unit_bytes) {
  auto per_rank = torch::zeros({3, world_.world_size}, torch::kDouble);
  const double mib = 1024.0 * 1024.0;
  per_rank[0][world_.rank] = static_cast<double>(parameter_bytes) / mib;
  per_rank[1][world_.rank] = static_cast<double>(gradient_bytes) / mib;
  per_rank[2][world_.rank] = static_cast<double>(optimizer_bytes) / mib;
  auto largest = std::get<0>(all_reduce_sum(world_, per_rank).max(1));
  if (world_.rank != 0) return;
  double params = largest[0].item<double>(), grads = largest[1].item<double>(), state = largest[2].item<double>();
  spdlog::info("memory per rank (largest): parameters {:.1f} MiB, gradients {:.1f} MiB, optimizer state {:.1f} MiB "
               "({:.1f} MiB in all){}",
               params, grads, state, params + grads + state,
               unit_bytes > 0 ? fmt::format("; the largest unit, gathered whole for its forward and backward, "
                                            "{:.1f} MiB", static_cast<double>(unit_bytes) / mib)
                              : "");
  MetricsRecord record = at_step(progress);
  if (unit_bytes > 0) record.emplace_back("gathered_unit_mib", static_cast<double>(unit_bytes) / mib);
  record.emplace_back("parameter_mib_max", params);
  record.emplace_back("gradient_mib_max", grads);
  record.emplace_back("optimizer_state_mib_max", state);
  metrics_->write(record);
}

void RunRecorder::log_last_steps(const TrainProgress& progress) {
  if (config_.train.log_every > 0 && window_sums_.value(window_.steps) > 0) log_window(progress);
}

void RunRecorder::finished(const TrainProgress& progress) {
  log_last_steps(progress);  // where the trainer has not already
  // Every rank's count: ranks read different things (a pipeline's later stages receive, the first sends).
  auto reads = torch::zeros({world_.world_size}, torch::kDouble);
  reads[world_.rank] = host_reads_.per_step();
  reads = all_reduce_sum(world_, reads);
  if (world_.rank == 0 && stepped_) {
    const auto most = reads.argmax().item<int64_t>();
    const double per_step = reads[most].item<double>();
    spdlog::info("tensor values read to the host a step, log steps aside: {:.2f} on the rank that reads most (rank {}) "
                 "over {} steps after the first (on a GPU, each a wait for the device)", per_step, most, host_reads_.steps());
    metrics_->write({{"step", static_cast<double>(progress.step)}, {"host_reads_per_step", per_step}});
  }
  if (world_.rank == 0) {
    double elapsed = seconds_since(run_start_);
    int64_t steps = progress.step - run_start_step_;
    // The rate over the rest of the run: evaluations are not steps.
    spdlog::info("done: {} steps in {:.1f} s ({:.1f} steps/s{}); model weights in {}/model.pt", steps, elapsed,
                 steps / std::max(elapsed - eval_seconds_, 1e-9),
                 eval_seconds_ > 0 ? fmt::format(" besides {:.1f} s of evaluation", eval_seconds_) : "", output_dir_);
  }
  if (progress_line_) {
    std::string line = fmt::format("{}step {}/{} | done\n", kProgressMarker, progress.step, total_steps_);
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fflush(stdout);
  }
  write_report(progress, 0);
}

void RunRecorder::stopped(const TrainProgress& progress, int signal, StopReason reason) {
  if (world_.rank == 0) spdlog::warn("stopping at step {}{}", progress.step, stop_text(signal, reason));
  // Every rank stops at this step: the steps since the last log line count. Apart from the stop's
  // record: a loss that is no number (said here) must not keep the stop from being recorded.
  try {
    log_last_steps(progress);
  } catch (const std::exception& e) {
    if (world_.rank == 0) spdlog::warn("the steps since the last log line are not logged: {}", e.what());
  }
  try {
    write_report(progress, 128 + (signal ? signal : SIGTERM));
  } catch (const std::exception& e) {  // the checkpoint is written: the stop stays a stop, said
    spdlog::warn("the stop is not recorded in metrics.jsonl: {}", e.what());
  }
}

void RunRecorder::failed(const TrainProgress& progress, int exit_status, int never_arrived_rank) {
  // ddp-train leaves at once after a failure's message (run_main's exit_at_once), with no
  // destructor run: the directory this run made, holding nothing trained, goes here.
  if (world_.rank == 0 && !created_dir_.empty() && !stepped_) {
    remove_unstepped_directory();
    return;
  }
  try {
    write_report(progress, exit_status, /*last=*/true, never_arrived_rank);
  } catch (const std::exception& e) {  // the failure's own message is the one that matters
    spdlog::warn("the failure is not recorded in metrics.jsonl: {}", e.what());
  }
}

void RunRecorder::write_report(const TrainProgress& progress, std::optional<int> exit_status, bool last,
                               int never_arrived_rank) {
  if (world_.rank != 0 || !metrics_) return;
  if (exit_status) {
    MetricsRecord end{{"step", static_cast<double>(progress.step)}, {"exit_status", static_cast<double>(*exit_status)}};
    if (never_arrived_rank >= 0) end.emplace_back("never_arrived_rank", static_cast<double>(never_arrived_rank));
    metrics_->write(end);
  }
  if (!config_.logging.report) return;
  auto start = Clock::now();
  if (!exit_status && !last && !report_pacer_.due(start)) return;  // the last render is never skipped
  try {
    write_run_report(output_dir_ + "/report.html", {output_dir_});
    report_pacer_.rendered(start, Clock::now());
  } catch (const std::exception& e) {
    spdlog::warn("no report.html: {}", e.what());  // the run's own files are what matter
  }
}

void RunRecorder::write_metrics(const MetricsRecord& record) {
  if (metrics_) metrics_->write(record);
}

}  // namespace ddp
