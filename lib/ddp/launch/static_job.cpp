#include <cstdlib>
#include <memory>
#include <string>
#include <utility>

#include "ddp/common/worker_contract.h"
#include "ddp/launch/job_membership.h"
#include "ddp/launch/log_layout.h"
#include "ddp/launch/machine.h"
#include "ddp/launch/output_relay.h"
#include "ddp/launch/process.h"

namespace ddp {
namespace {

class StaticJob : public JobMembership {
 public:
  StaticJob(LaunchOptions options, WorldLayout layout, std::unique_ptr<Rendezvous> rendezvous)
      : options_(std::move(options)), layout_(std::move(layout)), rendezvous_(std::move(rendezvous)) {
    if (!options_.redirects.empty()) options_.log_dir = make_torchrun_log_dir(options_.log_dir, layout_.run_id);
    // ddp-train says its threads in its first line; any other program hears it here, as under torchrun.
    if (!std::getenv(env::kOmpNumThreads) && !options_.runs_trainer) {
      int threads = threads_per_worker(options_.nproc_per_node);
      say("OMP_NUM_THREADS=" + std::to_string(threads) + " for each worker (" + std::to_string(available_cores()) +
          " cores / " + std::to_string(options_.nproc_per_node) + " worker(s)); set it to override");
    }
  }

  std::optional<AttemptPlan> meet(int attempt, BetweenAttempts& signals, int& exit_status) override {
    try {
      if (attempt > 0 && rendezvous_) rendezvous_->barrier_before(attempt, signals.check());
    } catch (const RestartCannotForm& e) {
      // The job ends as the failure that asked for the restart did, not as a rendezvous error.
      say(std::string(e.what()) + "; not restarting, and ending with the failure: " + last_failure_.cause);
      rendezvous_->finish(attempt - 1, signals.check(), last_failure_.status);
      exit_status = last_failure_.status;
      return std::nullopt;
    }
    if (!signals.signalled()) return AttemptPlan{options_, layout_, attempt, attempt};
    int sig = signals.signal();
    say("received " + signal_name(sig) + " between attempts; not restarting");
    // The others may have passed the barrier already: without this they would wait for our ranks.
    if (rendezvous_)
      rendezvous_->report_failure(attempt, {128 + sig,
                                            "node " + std::to_string(options_.node_rank) + " (" + options_.local_addr +
                                                ") was interrupted by " + signal_name(sig) + " between attempts",
                                            false, true});
    exit_status = 128 + sig;
    return std::nullopt;
  }

  void finish(const AttemptPlan& plan, const AttemptOutcome& outcome, AttemptDecision decision,
              BetweenAttempts& signals) override {
    if (decision == AttemptDecision::kGiveUp)
      say("giving up after " + std::to_string(options_.max_restarts) + " restart(s)");
    if (rendezvous_) rendezvous_->finish(plan.attempt, signals.check(), outcome.status);
  }

  Settled settle(const AttemptPlan&, AttemptOutcome& outcome, BetweenAttempts&, int&) override {
    last_failure_ = outcome;
    return Settled::kDecide;
  }

  std::string restarting(const AttemptPlan& plan, const AttemptOutcome& outcome) const override {
    return "restarting the workers (restart " + std::to_string(plan.attempt + 1) + " of " +
           std::to_string(options_.max_restarts) + ") after: " + outcome.cause;
  }

  Rendezvous* rendezvous() override { return rendezvous_.get(); }

 private:
  LaunchOptions options_;
  WorldLayout layout_;
  std::unique_ptr<Rendezvous> rendezvous_;  // null for one node with a private store
  AttemptOutcome last_failure_;  // the attempt before the one met for: what a restart that cannot form ends with
};

}  // namespace

std::unique_ptr<JobMembership> static_job(LaunchOptions options, WorldLayout layout,
                                          std::unique_ptr<Rendezvous> rendezvous) {
  return std::make_unique<StaticJob>(std::move(options), std::move(layout), std::move(rendezvous));
}

}  // namespace ddp
