#include "ddp/launch/attempt.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <sstream>
#include <vector>

#include "ddp/common/shared_memory_names.h"
#include "ddp/common/worker_contract.h"
#include "ddp/common/worker_identity.h"
#include "ddp/launch/elastic_rendezvous.h"
#include "ddp/launch/kv_store.h"
#include "ddp/launch/log_layout.h"
#include "ddp/launch/machine.h"
#include "ddp/launch/output_relay.h"
#include "ddp/launch/process.h"
#include "ddp/launch/recorded_error.h"
#include "ddp/launch/signals.h"
#include "ddp/launch/terminal_input.h"
#include "ddp/launch/watchdog.h"
#include "ddp/launch/worker_env.h"
#include "ddp/launch/worker_state.h"

namespace ddp {
namespace {

using Clock = std::chrono::steady_clock;

// How often the monitor asks the store about other nodes.
constexpr auto kRemoteCheckEvery = std::chrono::seconds(1);
constexpr auto kUnfinishedLineAfter = std::chrono::milliseconds(100);  // Note [Unfinished lines]: a pause, not a flush
// Elastic: how often a launcher beats and reads the others' beats (well inside --node-timeout).
constexpr auto kMembershipCheckEvery = std::chrono::milliseconds(500);

struct Worker {
  int local_rank = 0;
  int rank = 0;
  pid_t pid = -1;
  WorkerState state = WorkerState::kHealthy;  // from its spawn
  int status = 0;  // waitpid status once exited
  bool group_cleared = false;  // its process group was killed and forgotten when it was reaped
  int heartbeat_fd = -1;
  int64_t beats = 0;  // heartbeats received; stall detection starts with the first
  int64_t last_step = -1;
  int stage = -1;            // pipeline stage, from its beats
  int last_microbatch = -1;  // in a pipeline stage: the microbatch it last finished a part of
  Clock::time_point last_beat;
};

/// One attempt: start the workers, watch them until all exit, stop the rest on the first failure.
/// What it sees becomes events of its AttemptState (Note [Attempt states]), which decides.
class Attempt {
 public:
  /// `rendezvous` is null for single-node runs that meet through a private FileStore; `elastic` is
  /// the same object in an elastic job (then `attempt` is the round, and `restart_count` the failures).
  Attempt(const LaunchOptions& options, const WorldLayout& layout, Rendezvous* rendezvous, Watchdog& watchdog,
          SignalPipe& signals, int attempt, int restart_count, ElasticRendezvous* elastic = nullptr)
      : options_(options), layout_(layout), rendezvous_(rendezvous), elastic_(elastic), watchdog_(watchdog),
        signals_(signals), attempt_(attempt), restart_count_(restart_count),
        state_(elastic ? JobKind::kElastic : options.nnodes > 1 ? JobKind::kMultiNode : JobKind::kSingleNode,
               "node " + std::to_string(options.node_rank) + " (" + options.local_addr + ")",
               std::chrono::milliseconds(static_cast<int64_t>(options.node_timeout_s * 1000) + 3000)) {}

  AttemptOutcome run() {
    try {
      start_workers();
    } catch (...) {
      for (const auto& w : workers_) {
        signal_group(w.pid, SIGKILL);
        waitpid(w.pid, nullptr, 0);
        watchdog_.forget(w.pid);
        close(w.heartbeat_fd);
      }
      remove_leftover_shared_memory();
      throw;
    }
    monitor();
    relay_.drain_and_close();
    std::vector<pid_t> groups;
    for (auto& worker : workers_) {
      if (!worker.group_cleared) {  // every worker was reaped by now; this is a safety net
        signal_group(worker.pid, SIGKILL);
        watchdog_.forget(worker.pid);
      }
      close(worker.heartbeat_fd);
      groups.push_back(worker.pid);
    }
    // What a worker left in its group was sent SIGKILL, which takes effect a moment later: no
    // process of the attempt outlives it (a restart or ddprun's exit).
    if (!wait_groups_gone(groups, std::chrono::seconds(2)))
      say("some processes the workers started outlived SIGKILL for 2 s (in uninterruptible sleep?)");
    // What they started outside their groups (setsid), adopted here (become_subreaper), ends too.
    std::vector<std::string> strays = end_adopted_children({watchdog_.pid()}, std::chrono::seconds(2));
    if (!strays.empty()) {
      std::string named;
      for (const auto& stray : strays) named += (named.empty() ? "" : ", ") + stray;
      say("ended " + std::to_string(strays.size()) + (strays.size() == 1 ? " process" : " processes") +
          " the workers left running outside their process groups (a setsid or a daemon): " + named);
    }
    remove_leftover_shared_memory();
    if (state_.failure()) summarize(*state_.failure());
    return state_.outcome();
  }

 private:
  // Note [Log layout]: one layout, torchrun's: LOG_DIR/RUN_ID/attempt_N/RANK/{stdout,stderr}.log.
  // Both streams of every rank are kept there (and on the console); torchrun's --redirects take
  // streams off the console (without --log-dir, LOG_DIR is a fresh $TMPDIR/ddprun_XXXXXX, as
  // torchrun's torchelastic_XXXXXX). torchrun keeps only the streams --redirects and --tee name,
  // so `-r 1` lost stderr, and a failed rank's "full logs" could be an empty directory. Unlike
  // torchrun, RUN_ID has no random suffix and RANK is the global rank (the local one on a single
  // node, as torchrun numbers them): nodes can share LOG_DIR, and a run id that comes back finds its
  // earlier logs kept beside the new ones (Note [Earlier launches' logs]).
  bool torchrun_logs() const { return !options_.redirects.empty(); }
  std::string log_path(int rank, int stream_bit) const {
    if (options_.log_dir.empty()) return "";
    return rank_log_dir(rank) + (stream_bit == 1 ? "/stdout.log" : "/stderr.log");
  }
  std::string attempt_dir() const { return options_.log_dir + "/" + layout_.run_id + "/attempt_" + std::to_string(attempt_); }
  std::string rank_log_dir(int rank) const { return attempt_dir() + "/" + std::to_string(rank); }
  std::string error_file(int rank) const { return rank_log_dir(rank) + "/error.json"; }

  void start_workers() {
    oom_kills_at_start_ = out_of_memory_kills();
    if (!options_.log_dir.empty()) {
      make_log_directory(attempt_dir());
    }
    std::string host = options_.local_addr;
    auto base = current_environment();
    for (int local = 0; local < options_.nproc_per_node; ++local) {
      WorkerIdentity id;
      id.local_rank = local;
      id.rank = layout_.rank_offset + local;
      id.world_size = layout_.world_size;
      id.local_world_size = options_.nproc_per_node;
      id.node_rank = options_.node_rank;
      id.node_count = options_.nnodes;
      id.master_addr = options_.master_addr;
      id.master_port = layout_.master_port;
      id.store_path = layout_.store_path;
      id.run_id = layout_.run_id;
      id.restart_count = restart_count_;
      id.round = attempt_;
      id.max_restarts = options_.max_restarts;
      id.launcher_store = true;  // whatever the worker runs, it joins this launcher's store
      auto variables = worker_variables(id);
      variables[env::kHeartbeatFd] = std::to_string(kWorkerHeartbeatFd);
      const auto& filter = options_.local_ranks_filter;
      bool to_console = !filter || std::count(filter->begin(), filter->end(), local) > 0;
      bool stdout_redirected = torchrun_logs() && (options_.redirects[local] & 1);
      bool progress = to_console && !stdout_redirected && isatty(STDOUT_FILENO);
      if (progress) variables[env::kProgress] = "1";
      // Note [Role ranks]; one node's workers all have its role.
      variables[env::kRoleName] = options_.role;
      variables[env::kRoleRank] = std::to_string(layout_.role_rank_offset + local);
      variables[env::kRoleWorldSize] =
          std::to_string(layout_.role_world_size > 0 ? layout_.role_world_size : layout_.world_size);
      if (!std::getenv(env::kOmpNumThreads))
        variables[env::kOmpNumThreads] = std::to_string(threads_per_worker(options_.nproc_per_node));
      if (!options_.runs_trainer) variables.merge(torchrun_defaults(options_.python_torch_version, std::getenv));
      // As torchrun's: @record's report of a failed rank, which the summary names (stale ones removed).
      if (!options_.log_dir.empty()) {
        variables[env::kElasticErrorFile] = error_file(id.rank);
        std::error_code ignored;
        std::filesystem::remove(error_file(id.rank), ignored);
      }

      RelayTarget target;
      target.prefix = multi_node() ? "[" + host + ":rank " + std::to_string(id.rank) + "] "
                                 : "[rank " + std::to_string(id.rank) + "] ";
      target.to_console = to_console;
      target.progress = progress;
      target.stdout_log = log_path(id.rank, 1);
      target.stderr_log = log_path(id.rank, 2);
      if (torchrun_logs()) target.redirected = options_.redirects[local];
      if (!options_.log_dir.empty()) make_log_directory(rank_log_dir(id.rank));

      SpawnedProcess process =
          spawn_process(options_.program, merge_environment(base, variables), local == 0 ? terminal_.worker_end() : -1);
      if (local == 0) terminal_.worker_started();
      watchdog_.watch(process.pid);
      Worker worker;
      worker.local_rank = local;
      worker.rank = id.rank;
      worker.pid = process.pid;
      worker.heartbeat_fd = process.heartbeat_fd;
      workers_.push_back(worker);  // first: if the relay throws, run() still stops this worker
      relay_.add_worker(local, process.stdout_fd, process.stderr_fd, target);
    }
  }

  bool all_exited() const {
    for (const auto& w : workers_)
      if (w.state == WorkerState::kHealthy) return false;
    return true;
  }

  void monitor() {
    auto next_remote_check = Clock::now() + kRemoteCheckEvery;
    auto next_membership_check = Clock::now();
    const int tick_ms = std::max(1, static_cast<int>(options_.monitor_interval_s * 1000));
    last_tick_ = Clock::now();
    // A failure held back (Note [Failure or membership change]) is decided even after every worker exited.
    while (!all_exited() || state_.holding()) {
      std::vector<pollfd> fds{{signals_.fd(), POLLIN, 0}};
      // Note [Terminal input]: first, so that a typed line's echo is taken before other output.
      const int typed = terminal_.poll_fd();
      if (typed >= 0) fds.push_back({typed, POLLIN, 0});
      for (int fd : relay_.open_fds()) fds.push_back({fd, POLLIN, 0});
      int ready = poll(fds.data(), fds.size(), tick_ms);
      if (elastic_ && was_frozen()) continue;
      if (ready > 0) {
        for (std::size_t i = 1; i < fds.size(); ++i)
          if (fds[i].revents && fds[i].fd == typed) {
            if (terminal_.on_readable()) relay_.line_ended_by_echo();
          } else if (fds[i].revents)
            relay_.on_readable(fds[i].fd);
        for (int sig : signals_.take())
          if (sig != SIGCHLD) on_launcher_signal(sig);
      }
      relay_.show_unfinished_lines(kUnfinishedLineAfter);
      read_heartbeats();
      if (rendezvous_ && multi_node()) rendezvous_->beat_alive();  // Note [Silent nodes]
      reap();
      if (options_.stall_timeout_s > 0 && !state_.stopping()) check_stalls();
      // While a failure is held too: another node's report, come meanwhile, is its cause (a usage
      // error there, whose echo here would be restarted; the same first failure named on every node).
      if (multi_node() && (!state_.stopping() || state_.holding()) && Clock::now() >= next_remote_check) {
        check_other_nodes();
        next_remote_check = Clock::now() + kRemoteCheckEvery;
      }
      if (elastic_ && Clock::now() >= next_membership_check) {
        check_membership();
        next_membership_check = Clock::now() + kMembershipCheckEvery;
      }
      if (state_.hold_expired(Clock::now()) && multi_node()) check_other_nodes();  // a report come meanwhile
      if (state_.hold_expired(Clock::now())) apply(state_.on_hold_expired());
      if (stop_deadline_ && Clock::now() >= *stop_deadline_) {
        std::string killed;
        for (const auto& w : workers_)
          if (w.state == WorkerState::kHealthy) {
            signal_group(w.pid, SIGKILL);
            killed += (killed.empty() ? "" : ", ") + std::to_string(w.rank);
          }
        if (!killed.empty()) {  // what it was doing is lost: never silently
          std::ostringstream grace;
          grace << options_.shutdown_grace_s;
          say("rank(s) " + killed + " had not stopped " + grace.str() +
              " s after being asked (--shutdown-grace); killed them");
        }
        stop_deadline_.reset();
      }
    }
  }

  void read_heartbeats() {
    for (auto& w : workers_) {
      HeartbeatRecord steps[64];
      ssize_t n;
      while ((n = read(w.heartbeat_fd, steps, sizeof steps)) > 0) {
        w.beats += n / static_cast<ssize_t>(sizeof(HeartbeatRecord));
        if (n >= static_cast<ssize_t>(sizeof(HeartbeatRecord))) {
          HeartbeatBeat last = HeartbeatBeat::decode(steps[n / sizeof(HeartbeatRecord) - 1]);
          w.last_step = last.step;
          w.stage = last.stage;
          w.last_microbatch = last.microbatch;
        }
        w.last_beat = Clock::now();
      }
    }
  }

  // " (pipeline stage 1)" for a worker that said it runs one.
  static std::string stage_of(const Worker& w) {
    return w.stage >= 0 ? " (pipeline stage " + std::to_string(w.stage) + ")" : "";
  }
  static std::string microbatch_of(const Worker& w) {
    return w.last_microbatch >= 0 ? ", after its part of microbatch " + std::to_string(w.last_microbatch) : "";
  }

  // Note [Stalled rank]: when one rank stops, the others soon wait for it inside a collective, so
  // their heartbeats stop at the same step and the longest-silent rank may be any of them. A
  // process the kernel reports stopped (SIGSTOP, a debugger) or gone is the one that is stuck;
  // only without one is the longest-silent rank named.
  void check_stalls() {
    const Worker* longest = nullptr;
    for (const auto& w : workers_)
      if (w.state == WorkerState::kHealthy && w.beats > 0 && (!longest || w.last_beat < longest->last_beat))
        longest = &w;
    if (!longest) return;
    double silent = std::chrono::duration<double>(Clock::now() - longest->last_beat).count();
    if (silent < options_.stall_timeout_s) return;
    const Worker* stuck = longest;
    std::string how = "made no progress";
    for (const auto& w : workers_) {
      if (w.state != WorkerState::kHealthy) continue;
      char state = process_state(w.pid);
      if (state == 'T' || state == 't' || state == 'Z' || state == '?') {
        stuck = &w;
        how = state == 'T' || state == 't' ? "is stopped (process state " + std::string(1, state) + ": SIGSTOP or a debugger)"
                                           : "is no longer running";
        break;
      }
    }
    std::string what = "rank " + std::to_string(stuck->rank) + stage_of(*stuck) + " on " + options_.local_addr + " " +
                       how + " for " + std::to_string(static_cast<int>(silent)) + " s (--stall-timeout " +
                       std::to_string(static_cast<int>(options_.stall_timeout_s)) + "; its last heartbeat was at step " +
                       std::to_string(stuck->last_step) + microbatch_of(*stuck) + ")";
    // Where the others are: silent at the same step, they wait for it in a collective.
    std::string others;
    for (const auto& w : workers_) {
      if (&w == stuck || w.state != WorkerState::kHealthy) continue;
      double quiet = std::chrono::duration<double>(Clock::now() - w.last_beat).count();
      others += (others.empty() ? "" : ", ") + std::string("rank ") + std::to_string(w.rank) + stage_of(w) +
                " at step " + std::to_string(w.last_step) + microbatch_of(w) + " (" +
                std::to_string(static_cast<int>(quiet)) + " s ago)";
    }
    if (!others.empty()) what += "; the others' last heartbeats: " + others;
    apply(state_.on_stall(Failure{1, std::nullopt, what, true}));
  }

  // Other nodes exist, to tell about failures and to hear from (they always share a TCP store).
  bool multi_node() const { return options_.nnodes > 1 || elastic_; }

  /// Carries out what the state machine decided, in its order.
  void apply(const AttemptActions& actions) {
    if (!actions.say.empty()) say(actions.say);
    if (actions.leave) elastic_->leave(*actions.leave);
    if (actions.report) rendezvous_->report_failure(attempt_, *actions.report);
    if (actions.kill_now)
      for (const auto& w : workers_)
        if (w.state == WorkerState::kHealthy) signal_group(w.pid, SIGKILL);
    if (actions.stop_signal) stop_all(actions.stop_signal, actions.stop_reason);
  }

  // Segments a worker created but died before unlinking (see shared_memory_names.h).
  void remove_leftover_shared_memory() const {
    std::vector<pid_t> pids;
    for (const auto& w : workers_) pids.push_back(w.pid);
    remove_shared_memory_of(pids);
  }

  void reap() {
    for (auto& w : workers_) {
      if (w.state != WorkerState::kHealthy) continue;
      // Note [Another node's report first]: a rank stopped for a rank interrupted on another node
      // exits 143 at the agreed step, maybe before this loop's next look at the store. The store is
      // read before such an exit is classed, so that it is "stopped", not a failure to restart;
      // the worker is left unreaped meanwhile, as what the report asks may signal its group.
      siginfo_t exited{};
      const bool peeked = multi_node() && !state_.stopping() &&
                          waitid(P_PID, static_cast<id_t>(w.pid), &exited, WEXITED | WNOHANG | WNOWAIT) == 0 &&
                          exited.si_pid == w.pid;
      if (peeked && !(exited.si_code == CLD_EXITED && exited.si_status == 0)) check_other_nodes();
      int status = 0;
      pid_t done = waitpid(w.pid, &status, WNOHANG);
      if (done != w.pid) continue;
      // Now, while its group id cannot yet belong to anyone else: once the group is empty, the
      // kernel may reuse the number, and a later kill(-pid) could hit a stranger's group.
      signal_group(w.pid, SIGKILL);  // anything the worker left behind in its group
      watchdog_.forget(w.pid);
      w.group_cleared = true;
      w.status = status;
      const bool stopping = state_.stopping();
      w.state = state_after_exit(status, stopping);
      // A signal to a worker is a stop request, as one to the launcher is: the ranks stop together
      // and the run ends, stopped; a restart would only go on with what was asked to stop.
      const int asked = stopping ? 0 : stop_signal_of(status);
      Failure failure{
          exit_code_of(status), w.local_rank,
          "rank " + std::to_string(w.rank) + " on " + options_.local_addr + ": " + describe_wait_status(status) +
              (!asked ? ""
               : WIFSIGNALED(status)
                   ? ": a worker was asked to stop (" + signal_name(asked) + "), and its ranks stopped"
                   // An exit status, which says no more than that: a wrapper whose child was
                   // stopped, ddp-train once stopped, or a program that exits so of its own.
                   : ": taken as a stop request (128 + " + signal_name(asked) + ", as a program stopped by " +
                         signal_name(asked) + " exits), and its ranks stopped"),
          restartable_failure(status) && !asked, asked != 0};
      if (w.state == WorkerState::kFailed)
        apply(state_.on_worker_failed(failure, Clock::now()));
      else if (w.state == WorkerState::kStopped && !failure.restartable)
        apply(state_.on_usage_error_while_stopping(failure));
    }
  }

  // Elastic, the other side of Note [A frozen store host]: a launcher that was not running for
  // longer than --node-timeout (SIGSTOP, a frozen VM) has been taken for lost by the others, who
  // went on without it (a store it hosted taken over). It leaves rather than act on a round that
  // is over: its workers' checkpoints and outputs are the others' now.
  // Each stretch of the loop between two calls takes a tick, or one store call that gives up after
  // --node-timeout (Note [A frozen store host]): twice that is a stop, never a slow stretch.
  bool was_frozen() {
    const auto now = Clock::now();
    const double stopped = std::chrono::duration<double>(now - last_tick_).count();
    last_tick_ = now;
    if (state_.frozen() || stopped <= 2 * options_.node_timeout_s) return false;
    char text[256];
    std::snprintf(text, sizeof text, "this launcher did not run for %.0f s (stopped or frozen; over twice --node-timeout "
                  "%g s), so the other nodes have gone on without it", stopped, options_.node_timeout_s);
    apply(state_.on_frozen(text));
    return true;
  }

  // Elastic: beats, and ends the round on a membership change (announced by any node).
  void check_membership() {
    if (!state_.watches_membership() || store_closed_at_end_) return;
    std::optional<MembershipChange> change;
    try {
      change = elastic_->check_membership();
    } catch (const StoreNotAnswering& e) {
      change = store_lost(e.what());
    } catch (const std::exception&) {
      change = store_lost("");
    }
    if (!change || was_frozen()) return;  // stopped in the call: the others' silence is this node's own
    apply(state_.on_membership_change(*change, attempt_));
  }

  // The store went (`why`, when it stopped answering). Between rounds, node 1 takes it over (Note
  // [Store failover]), unless node 0 finished the job and closed it after --rdzv-timeout: this
  // node's workers then run on to their end, rather than be stopped and started again in a round of
  // their own.
  std::optional<MembershipChange> store_lost(const std::string& why) {
    if (elastic_->node_0_finished()) {
      say("node 0 finished the job and closed the rendezvous store; this node's workers run on to their end");
      store_closed_at_end_ = true;
      return std::nullopt;
    }
    return MembershipChange{MembershipChange::Kind::kStoreLost, "lost the rendezvous store at " +
                                                                     elastic_->store_description() +
                                                                     (why.empty() ? "" : ": " + why)};
  }

  void on_launcher_signal(int sig) { apply(state_.on_signal(sig, healthy_count())); }

  void check_other_nodes() {
    std::optional<RemoteFailure> remote;
    try {
      remote = rendezvous_->remote_failure(attempt_);
    } catch (const std::exception& e) {
      if (elastic_) return;  // check_membership says it, naming the store's host
      remote = RemoteFailure{1,
                             "lost contact with the rendezvous at " + options_.master_addr + ":" +
                                 std::to_string(options_.master_port) + " (node 0 gone?)",
                             false};
    }
    if (remote) apply(state_.on_remote_failure(*remote));
  }

  int healthy_count() const {
    int n = 0;
    for (const auto& w : workers_) n += w.state == WorkerState::kHealthy;
    return n;
  }

  /// Asks every live worker's group to stop; SIGKILL follows after the grace period.
  void stop_all(int sig, StopReason reason) {
    for (const auto& w : workers_) {
      if (w.state != WorkerState::kHealthy) continue;
      // ddp-train first, with why (worker_contract.h); any other program gets the signal once.
      if (reason != StopReason::kAsked && options_.runs_trainer) queue_signal(w.pid, sig, static_cast<int>(reason));
      signal_group(w.pid, sig);
    }
    stop_deadline_ = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(options_.shutdown_grace_s * 1000));
  }

  // The rank a worker's last report names: a worker of rank threads (dist.threads) holds several
  // ranks, and its report names the one that failed; else the worker's own.
  int reported_rank(const Worker& w) const {
    const auto tail = relay_.stderr_tail(w.local_rank);
    for (auto line = tail.rbegin(); line != tail.rend(); ++line)
      if (auto rank = rank_reported(*line)) return *rank;
    return w.rank;
  }

  // Whether `w` exited with `status` on a failure it reports as its own (not relayed).
  bool reports_own_failure(const Worker& w, int status) const {
    const auto tail = relay_.stderr_tail(w.local_rank);
    return w.state != WorkerState::kHealthy && WIFEXITED(w.status) && WIFEXITED(status) &&
           WEXITSTATUS(w.status) == WEXITSTATUS(status) && !tail.empty() && rank_reported(tail.back()) == w.rank &&
           !rank_relayed(tail.back());
  }

  void summarize(const Failure& f) const {
    if (!f.worker || f.interrupted) {
      say((f.interrupted ? "stopped: " : "failed: ") + f.description);
      return;
    }
    const Worker& w = workers_[*f.worker];
    auto tail = relay_.stderr_tail(w.local_rank);
    auto shown = WIFEXITED(w.status) && WEXITSTATUS(w.status) == kExitUsage && !tail.empty() &&
                         is_usage_error_line(tail.back())
                     ? relay_.usage_error_shown_by(tail.back())
                     : std::nullopt;
    if (shown) {
      // Note [One usage error]: the message is on the console once already, in whichever rank's words
      // came first; the logs would add nothing. The rank named is the one whose words those are.
      int rank = w.rank;
      for (const auto& said : workers_)
        if (said.local_rank == *shown) rank = reported_rank(said);
      say("rank " + std::to_string(rank) + " stopped on a usage error (exit code " + std::to_string(kExitUsage) +
          "), for the reason above");
      return;
    }
    const int reported = reported_rank(w);
    const bool thread = reported != w.rank;
    // Note [The rank that failed, not the first to say so]: when rank 0's disk fills, every rank
    // fails with its words ("rank 0: ... No space left on device"), and whichever exits first is
    // reaped first. The summary is of the rank whose failure it was, where it ran on this node.
    if (!thread && !tail.empty())
      if (auto relayed = rank_relayed(tail.back()))
        for (std::size_t other = 0; other < workers_.size(); ++other)
          if (workers_[other].rank == *relayed && reports_own_failure(workers_[other], w.status)) {
            say("rank " + std::to_string(w.rank) + " exited first, relaying rank " + std::to_string(*relayed) +
                "'s failure");
            return summarize(
                Failure{f.exit_code, static_cast<int>(other), f.description, f.restartable, f.interrupted});
          }
    const std::string who = thread ? "rank " + std::to_string(reported) + "'s process" : "rank " + std::to_string(w.rank);
    say("rank " + std::to_string(reported) + " failed first: " + describe_wait_status(w.status) +
        " (" + (thread ? "a thread of the worker of " : "") + "local rank " + std::to_string(w.local_rank) + " on " +
        options_.local_addr + ", pid " + std::to_string(w.pid) + ")");
    // SIGKILL says nothing of who sent it; the kernel counts the out-of-memory killer's.
    const auto oom_kills = out_of_memory_kills();
    if (WIFSIGNALED(w.status) && WTERMSIG(w.status) == SIGKILL && oom_kills && oom_kills_at_start_ &&
        *oom_kills > *oom_kills_at_start_)
      say("the kernel's out-of-memory killer ended " + std::to_string(*oom_kills - *oom_kills_at_start_) +
          " process(es) while the workers ran (oom_kill in /proc/vmstat; dmesg names them): most likely " + who +
          ", the node (or its memory cgroup) out of memory");
    if (!options_.log_dir.empty())
      if (auto recorded = recorded_error(error_file(w.rank)))
        say(who + "'s error file (@record): " + *recorded + " (" + error_file(w.rank) + ")");
    if (tail.empty()) {
      say(who + " wrote nothing to stderr");
    } else {
      say("last " + std::to_string(tail.size()) + " stderr line(s) of " + who + ":");
      for (const auto& line : tail) say("  | " + line);
    }
    int stopped = 0;
    for (const auto& other : workers_) stopped += other.state == WorkerState::kStopped && other.pid != w.pid;
    if (stopped > 0) say("stopped the other " + std::to_string(stopped) + " worker(s) of this node");
    if (options_.log_dir.empty())
      say("full output: rerun with --log-dir DIR to keep each rank's stdout and stderr");
    else
      say("full logs: " + rank_log_dir(w.rank) + "/");
  }

  const LaunchOptions& options_;
  const WorldLayout& layout_;
  Rendezvous* rendezvous_;
  ElasticRendezvous* elastic_;
  bool store_closed_at_end_ = false;  // elastic: node 0 finished and closed its store; nothing to watch
  Watchdog& watchdog_;
  SignalPipe& signals_;
  int attempt_;
  int restart_count_;
  AttemptState state_;
  Clock::time_point last_tick_;  // elastic: when the monitor loop last checked it was not stopped (was_frozen)
  std::optional<int64_t> oom_kills_at_start_;  // out_of_memory_kills() as the workers started
  OutputRelay relay_;
  TerminalInput terminal_;  // Note [Terminal input]
  std::vector<Worker> workers_;
  std::optional<Clock::time_point> stop_deadline_;
};

}  // namespace

AttemptOutcome run_attempt(const LaunchOptions& options, const WorldLayout& layout, Rendezvous* rendezvous,
                           Watchdog& watchdog, SignalPipe& signals, int attempt, int restart_count,
                           ElasticRendezvous* elastic) {
  return Attempt(options, layout, rendezvous, watchdog, signals, attempt, restart_count, elastic).run();
}

}  // namespace ddp
