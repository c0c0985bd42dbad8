#include "ddp/loop/worker_signals.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>

#include "ddp/common/text.h"
#include "ddp/common/worker_contract.h"

namespace ddp {
namespace {

std::atomic<int> g_stop_signal{0};

void on_stop(int sig) { g_stop_signal.store(sig); }

}  // namespace

void install_stop_handlers() {
  struct sigaction action = {};
  action.sa_handler = on_stop;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGHUP, &action, nullptr);  // a lost terminal: checkpoint and stop, as for SIGTERM
}

int stop_signal() { return g_stop_signal.load(); }

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
