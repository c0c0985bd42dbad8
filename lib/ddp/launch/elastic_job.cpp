#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "ddp/common/error.h"
#include "ddp/common/worker_contract.h"
#include "ddp/launch/job_membership.h"
#include "ddp/launch/log_layout.h"
#include "ddp/launch/output_relay.h"
#include "ddp/launch/process.h"

namespace ddp {
namespace {

class ElasticJob : public JobMembership {
 public:
  explicit ElasticJob(LaunchOptions options) : options_(std::move(options)), rendezvous_(options_) {}

  std::optional<AttemptPlan> meet(int attempt, BetweenAttempts& signals, int& exit_status) override {
    std::optional<WorldLayout> layout;
    try {
      layout = rendezvous_.join_round(attempt, signals.check());
    } catch (const UserError&) {
      throw;
    } catch (const std::exception& e) {
      std::string cause = e.what();
      std::string lost = "lost the rendezvous store at " + rendezvous_.store_description();
      if (rendezvous_.node_0_finished() && restarting_from_) {  // a round of its own would be no job's
        say("node 0 finished the job and closed its store, so this node's restart cannot form; not restarting, "
            "and ending with the failure: " + restarting_from_->cause);
        exit_status = restarting_from_->status;
        return std::nullopt;
      }
      auto taken = rendezvous_.take_over_store(/*round_failed=*/restarting_from_.has_value(), signals.check());
      if (!taken && signals.signalled()) {  // read now: it may have come after the wait, in the store's calls
        exit_status = left_waiting_for_store(signals);
        return std::nullopt;
      }
      if (!taken)
        throw UserError(lost + ": the job cannot go on without it (" + cause.substr(0, cause.find('\n')) +
                        "); the same command resumes it from its last checkpoint");
      say(*taken);
      layout = rendezvous_.join_round(attempt, signals.check());
    }
    if (!layout) {
      if (rendezvous_.finished_before_admission() && restarting_from_) {
        // Its ranks' work is undone: the job did not finish, whatever the others' workers did.
        say("the job's other nodes finished before this node's restart could form; not restarting, and ending "
            "with the failure: " + restarting_from_->cause);
        rendezvous_.finish(failed_round_, signals.check(), restarting_from_->status);  // node 0 waits for it
        exit_status = restarting_from_->status;
        return std::nullopt;
      }
      if (rendezvous_.finished_before_admission()) {
        say("the job finished before this node was admitted");
        exit_status = 0;
        return std::nullopt;
      }
      say("received " + signal_name(signals.signal()) + " while waiting for a round; leaving the job");
      exit_status = 128 + signals.signal();
      return std::nullopt;
    }
    restarting_from_.reset();
    const int round = rendezvous_.round();
    // The job's count, which a node that joined late knows too: every round before this one ended in
    // a failure or a membership change.
    changes_ = round - layout->failures;
    layout->master_port = rendezvous_.port();
    std::string hosts;
    for (const auto& host : layout->hosts) hosts += (hosts.empty() ? "" : ", ") + host;
    say("rendezvous round " + std::to_string(round) + ": node rank " + std::to_string(layout->node_rank) + " of " +
        std::to_string(layout->node_count) + " (" + hosts + "), world size " + std::to_string(layout->world_size) +
        "; failures so far " + std::to_string(layout->failures) + " (--max-restarts " +
        std::to_string(options_.max_restarts) + "), membership changes " + std::to_string(changes_));
    if (!logs_placed_ && !options_.redirects.empty())  // this node's first round, which a late joiner starts at > 0
      options_.log_dir = make_torchrun_log_dir(options_.log_dir, layout->run_id);
    logs_placed_ = true;
    AttemptPlan plan{options_, *layout, round, layout->failures};
    plan.options.master_addr = rendezvous_.store_address();  // the workers' store too
    plan.options.node_rank = layout->node_rank;
    plan.options.nnodes = layout->node_count;
    return plan;
  }

  Settled settle(const AttemptPlan& plan, AttemptOutcome& outcome, BetweenAttempts& signals,
                 int& exit_status) override {
    if (outcome.membership && outcome.membership->kind == MembershipChange::Kind::kStoreLost) {
      auto taken = rendezvous_.take_over_store(/*round_failed=*/false, signals.check());
      if (!taken && signals.signalled()) {
        exit_status = left_waiting_for_store(signals);
        return Settled::kExit;
      }
      if (!taken)
        throw UserError(outcome.cause + ": the job cannot go on without it; the same command resumes it from its "
                        "last checkpoint");
      outcome.cause = *taken;
    }
    if (outcome.membership) {
      ++changes_;
      say("membership change " + std::to_string(changes_) + " (not counted against --max-restarts): " +
          outcome.cause + "; the remaining nodes meet again in round " + std::to_string(plan.attempt + 1));
      return Settled::kMeetAgain;
    }
    exit_status = outcome.status;
    if (outcome.left) {
      // Left on a signal: whether the others go on (a frozen launcher's cause says they have).
      say("left the job (" + outcome.cause + ")" + (outcome.status > 128 ? who_goes_on() : ""));
      return Settled::kExit;
    }
    if (outcome.status == kExitUsage && !outcome.restartable && !rendezvous_.newcomers().empty()) {
      // Note [Admission]: the newcomers could not join; the job goes on without them.
      rendezvous_.refuse_newcomers(plan.attempt);
      if (rendezvous_.newcomer()) {
        say("refused by the running job, which goes on without this node: " + outcome.cause);
        return Settled::kExit;
      }
      std::string refused;
      for (const auto& host : rendezvous_.newcomers()) refused += (refused.empty() ? "" : ", ") + host;
      ++changes_;
      say("membership change " + std::to_string(changes_) + " (not counted against --max-restarts): the node(s) that "
          "joined in round " + std::to_string(plan.attempt) + " (" + refused + ") were refused, as their workers "
          "could not start with the job's (" + outcome.cause + "); the remaining nodes meet again in round " +
          std::to_string(plan.attempt + 1));
      return Settled::kMeetAgain;
    }
    if (outcome.status != 0) {  // if it is restarted: what a restart that cannot form ends with
      restarting_from_ = outcome;
      failed_round_ = plan.attempt;
    }
    return Settled::kDecide;
  }

  void finish(const AttemptPlan& plan, const AttemptOutcome& outcome, AttemptDecision decision,
              BetweenAttempts& signals) override {
    if (decision == AttemptDecision::kGiveUp)
      say("giving up after " + std::to_string(options_.max_restarts) + " restart(s) for failures (and " +
          std::to_string(changes_) + " membership change(s), which do not count)");
    if (outcome.status == 0 && plan.layout.node_rank == 0) rendezvous_.job_finished();
    rendezvous_.finish(plan.attempt, signals.check());
  }

  std::string restarting(const AttemptPlan& plan, const AttemptOutcome& outcome) const override {
    return "restarting the workers in round " + std::to_string(plan.attempt + 1) + " (restart " +
           std::to_string(plan.failures_before + 1) + " of " + std::to_string(options_.max_restarts) +
           ") after: " + outcome.cause;
  }

  Rendezvous* rendezvous() override { return &rendezvous_; }
  ElasticRendezvous* elastic() override { return &rendezvous_; }

 private:
  // A signal while this node waited for node 1's new store (Note [Store failover]): it leaves as
  // from a round's wait; the store is gone, so there is no one to tell. Returns the exit status.
  int left_waiting_for_store(const BetweenAttempts& signals) const {
    say("received " + signal_name(signals.signal()) + " while waiting for node 1 to host a new rendezvous store; "
        "leaving the job");
    return 128 + signals.signal();
  }

  // After "left the job (...)": whether the others go on. Under scancel every node leaves at once,
  // and none does; nor do they when node 0 leaves with node 1, which would host the next store.
  std::string who_goes_on() {
    const std::string resumes = "the same command resumes it from its last checkpoint";
    auto leaving = rendezvous_.members_leaving();
    if (!leaving) return "";
    const auto staying = static_cast<int>(std::count(leaving->begin(), leaving->end(), false));
    if (leaving->size() == 1) return "; it was the round's only node: the job stops here, and " + resumes;
    if (staying == 0) return ", as every other node of the round did: the job stops here, and " + resumes;
    if ((*leaving)[0] && (*leaving)[1])
      return "; node 0, whose store the job meets in, and node 1, which would host the next, both leave, so the other " +
             std::to_string(staying) + " node(s) cannot go on: " + resumes;
    if (staying < options_.min_nodes)
      return "; " + std::to_string(staying) + " node(s) stay, fewer than --nnodes " + std::to_string(options_.min_nodes) +
             ":" + std::to_string(options_.nnodes) + " needs, and they wait up to --rdzv-timeout for more";
    return "; the other " + std::to_string(staying) + " node(s) go on without this one";
  }

  LaunchOptions options_;  // log_dir: the one made in round 0
  ElasticRendezvous rendezvous_;
  int changes_ = 0;  // membership changes so far
  bool logs_placed_ = false;  // LOG_DIR made (or taken from --log-dir) and said, in this node's first round
  std::optional<AttemptOutcome> restarting_from_;  // the failure of the round this node restarts after
  int failed_round_ = 0;                            // that round
};

}  // namespace

std::unique_ptr<JobMembership> elastic_job(LaunchOptions options) {
  return std::make_unique<ElasticJob>(std::move(options));
}

}  // namespace ddp
