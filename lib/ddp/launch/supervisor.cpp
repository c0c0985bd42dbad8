#include "ddp/launch/supervisor.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "ddp/common/error.h"
#include "ddp/common/master_address.h"
#include "ddp/launch/attempt.h"
#include "ddp/launch/job_membership.h"
#include "ddp/launch/machine.h"
#include "ddp/launch/output_relay.h"
#include "ddp/launch/python_check.h"
#include "ddp/launch/process.h"
#include "ddp/launch/signals.h"
#include "ddp/launch/watchdog.h"

namespace ddp {
namespace {

/// The loop of Note [Job states] (job_membership.h); returns the launcher's exit status.
int supervise(JobMembership& job, int max_restarts, Watchdog& watchdog, SignalPipe& signal_pipe) {
  for (int attempt = 0;; ++attempt) {
    BetweenAttempts signals(signal_pipe);
    int exit_status = 0;
    std::optional<AttemptPlan> plan = job.meet(attempt, signals, exit_status);
    if (!plan) return exit_status;
    attempt = plan->attempt;  // elastic: the round this node joined
    AttemptOutcome outcome = run_attempt(plan->options, plan->layout, job.rendezvous(), watchdog, signal_pipe,
                                         plan->attempt, plan->failures_before, job.elastic());
    BetweenAttempts settling(signal_pipe);
    switch (job.settle(*plan, outcome, settling, exit_status)) {
      case Settled::kMeetAgain:
        continue;
      case Settled::kExit:
        return exit_status;
      case Settled::kDecide:
        break;
    }
    auto decision = decide_after_attempt(outcome.status, outcome.restartable, plan->failures_before, max_restarts);
    // A restart was left, and exit code 2 forgoes it: said, since torchrun restarts any failure.
    if (decision == AttemptDecision::kFinish && outcome.status == kExitUsage && !outcome.restartable &&
        plan->failures_before < max_restarts)
      say("not restarting: exit code 2 is a usage error (a bad config, command line or input), which a restart "
          "would repeat");
    if (decision != AttemptDecision::kRestart) {
      BetweenAttempts after(signal_pipe);
      job.finish(*plan, outcome, decision, after);
      return outcome.status;
    }
    say(job.restarting(*plan, outcome));
  }
}

}  // namespace

int run_launcher(const LaunchOptions& requested) {
  LaunchOptions options = requested;  // node_rank: as the rendezvous agreed
  become_subreaper();  // a worker's setsid child comes back here when the worker ends, not to init
  // Before any rank starts: a Python without torch fails here once, not in every rank.
  if (!options.python.empty()) say(check_python(options.python, options.python_script, &options.python_torch_version));
  if (options.local_addr.empty()) options.local_addr = host_name();
  // One node running ddp-train needs no network rendezvous: a private FileStore keeps the run
  // off every interface. Several nodes, or any other program (torch's env:// expects
  // MASTER_ADDR:MASTER_PORT), get node 0's TCPStore.
  bool private_store = options.nnodes == 1 && options.runs_trainer;
  // Its directory exists before the watchdog forks (mkdtemp starts no thread), so that the watchdog
  // can remove it when a SIGKILL leaves nobody else to.
  std::unique_ptr<PrivateStoreDir> store_dir = private_store ? std::make_unique<PrivateStoreDir>() : nullptr;
  Watchdog watchdog(store_dir ? store_dir->path() : "");  // before the store starts threads

  std::unique_ptr<JobMembership> job;
  std::optional<ExitOnStopSignal> meeting;  // until the SignalPipe: the rendezvous is waited for here
  if (private_store) {
    WorldLayout layout;
    layout.world_size = options.nproc_per_node;
    layout.run_id = options.run_id.empty() ? generate_run_id() : options.run_id;
    layout.hosts = {options.local_addr};
    layout.master_port = options.master_port;
    layout.store_path = store_dir->path();
    job = static_job(options, std::move(layout), nullptr);
  } else {
    // Every node resolves node 0's name alike: under Slurm it may be a node name only Slurm knows.
    auto master = resolve_master_address(options.master_addr,
                                         "give node 0's address, one every node can resolve, with --master-addr (or "
                                         "MASTER_ADDR, or the host of --rdzv-endpoint)");
    if (!master.note.empty()) say(master.note);
    options.master_addr = master.address;
    meeting.emplace("while waiting for the rendezvous at " + options.master_addr +
                    (options.master_port > 0 ? ":" + std::to_string(options.master_port) : "") +
                    " (no worker had started)");
    if (options.elastic()) {
      job = elastic_job(options);
    } else {
      auto rendezvous = std::make_unique<Rendezvous>(options);
      WorldLayout layout = rendezvous->join();
      layout.master_port = rendezvous->port();
      if (options.node_rank_by_arrival)
        say("node rank " + std::to_string(layout.node_rank) + " of " + std::to_string(options.nnodes) +
            " (by arrival at " + options.master_addr + ":" + std::to_string(layout.master_port) + ")");
      options.node_rank = layout.node_rank;
      job = static_job(options, std::move(layout), std::move(rendezvous));
    }
  }
  meeting.reset();
  SignalPipe signals;
  return supervise(*job, options.max_restarts, watchdog, signals);
}


}  // namespace ddp
