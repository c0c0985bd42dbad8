#include "ddp/loop/rank_log.h"

#include <spdlog/sinks/sink.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <string>
#include <vector>

namespace ddp {
namespace {

thread_local int t_log_rank = -1;  // -1: not a rank's thread (the main thread, a helper)

class RankFilterSink final : public spdlog::sinks::sink {
 public:
  explicit RankFilterSink(std::vector<spdlog::sink_ptr> sinks) : sinks_(std::move(sinks)) {}

  void log(const spdlog::details::log_msg& msg) override {
    if (t_log_rank <= 0) return forward(msg);
    if (msg.level < spdlog::level::warn) return;
    std::string text = "rank " + std::to_string(t_log_rank) + ": " + std::string(msg.payload.data(), msg.payload.size());
    spdlog::details::log_msg named = msg;
    named.payload = text;
    forward(named);
  }
  void flush() override {
    for (auto& sink : sinks_) sink->flush();
  }
  void set_pattern(const std::string& pattern) override {
    for (auto& sink : sinks_) sink->set_pattern(pattern);
  }
  void set_formatter(std::unique_ptr<spdlog::formatter> formatter) override {
    for (auto& sink : sinks_) sink->set_formatter(formatter->clone());
  }

 private:
  void forward(const spdlog::details::log_msg& msg) {
    for (auto& sink : sinks_)
      if (sink->should_log(msg.level)) sink->log(msg);
  }

  std::vector<spdlog::sink_ptr> sinks_;
};

}  // namespace

void log_by_rank_thread() {
  auto logger = spdlog::default_logger();
  std::vector<spdlog::sink_ptr> sinks = logger->sinks();
  if (sinks.size() == 1 && std::dynamic_pointer_cast<RankFilterSink>(sinks[0])) return;  // already
  logger->sinks() = {std::make_shared<RankFilterSink>(std::move(sinks))};
}

void set_log_rank(int rank) { t_log_rank = rank; }

}  // namespace ddp
