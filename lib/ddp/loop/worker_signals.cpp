#include "ddp/loop/worker_signals.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "ddp/common/text.h"
#include "ddp/common/worker_contract.h"

namespace ddp {
namespace {

std::atomic<int> g_stop_signal{0};
std::atomic<int> g_stop_reason{0};

// The first stop signal and the first queued reason stand: the launcher's plain signal to the group
// that follows a queued one, or a user's Ctrl-C after it, says nothing new. The queued reason is
// taken even when a plain signal's handler, on another thread, got in first: the launcher sends
// both at once, and the kernel hands each to whichever thread it picks. (So a Ctrl-C followed by
// the launcher's queued reason is told by that reason.)
void on_stop(int sig, siginfo_t* info, void*) {
  int none = 0;
  if (info && info->si_code == SI_QUEUE) g_stop_reason.compare_exchange_strong(none, info->si_value.sival_int);
  none = 0;
  g_stop_signal.compare_exchange_strong(none, sig);
}

}  // namespace

void install_stop_handlers() {
  struct sigaction action = {};
  action.sa_sigaction = on_stop;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART | SA_SIGINFO;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGHUP, &action, nullptr);  // a lost terminal: checkpoint and stop, as for SIGTERM
  sigaction(SIGQUIT, &action, nullptr);  // Ctrl-\ (which ddprun passes on, as torchrun does): the same
  // Slurm's --signal=USR1@N (srun tasks, or ddprun passing it on): its default action would end the
  // rank with no checkpoint, minutes before the time limit it warns of.
  sigaction(SIGUSR1, &action, nullptr);
  sigaction(SIGUSR2, &action, nullptr);
}

int stop_signal() { return g_stop_signal.load(); }

StopReason stop_reason() {
  int reason = g_stop_reason.load();
  return reason >= 0 && reason <= static_cast<int>(StopReason::kPeerInterrupted) ? static_cast<StopReason>(reason)
                                                                                 : StopReason::kAsked;
}

void StopVote::cast() {
  auto vote = side_values_[vote_];
  auto reasons = side_values_[reasons_];
  std::fill(vote.begin(), vote.end(), 0.0);
  std::fill(reasons.begin(), reasons.end(), 0.0);
  if (stop_signal() == 0) return;
  vote[0] = 1;
  reasons[static_cast<std::size_t>(stop_reason())] = 1;
}

StopReason StopVote::reason() const {
  auto reasons = side_values_[reasons_];
  for (StopReason reason : {StopReason::kMembershipChanged, StopReason::kPeerInterrupted, StopReason::kPeerFailed})
    if (reasons[static_cast<std::size_t>(reason)] > 0) return reason;
  return StopReason::kAsked;
}

Heartbeat::Heartbeat() {
  const char* value = std::getenv(env::kHeartbeatFd);
  auto fd = value ? parse_int(value) : std::nullopt;
  if (!fd || fcntl(static_cast<int>(*fd), F_GETFD) < 0) return;
  fd_ = static_cast<int>(*fd);
  fcntl(fd_, F_SETFD, FD_CLOEXEC);  // not for anything this worker might start
  fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK);
}

void Heartbeat::beat(int64_t step, int microbatch) const {
  if (fd_ < 0) return;
  // A full pipe means the launcher has plenty of recent beats; dropping this one is fine.
  HeartbeatRecord record = HeartbeatBeat{step, stage_, microbatch}.encode();
  [[maybe_unused]] ssize_t n = write(fd_, &record, sizeof record);
}

HeartbeatPulse::HeartbeatPulse(const Heartbeat& heartbeat, int64_t step) {
  heartbeat.beat(step);
  if (!heartbeat.watched()) return;
  thread_ = std::thread([this, &heartbeat, step] {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!wake_.wait_for(lock, std::chrono::seconds(1), [this] { return done_; })) heartbeat.beat(step);
  });
}

HeartbeatPulse::~HeartbeatPulse() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

}  // namespace ddp
