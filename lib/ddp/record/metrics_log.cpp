#include "ddp/record/metrics_log.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include "ddp/common/atomic_file.h"
#include "ddp/common/error.h"
#include "ddp/record/event_file.h"

namespace ddp {

std::string to_json(const MetricsRecord& record) {
  std::string json = "{";
  for (const auto& [name, value] : record) {
    if (json.size() > 1) json += ", ";
    json += nlohmann::json(name).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + ": ";  // quoted, escaped
    if (!std::isfinite(value))
      json += "null";
    else if (value == std::floor(value) && std::fabs(value) < 1e15)
      json += fmt::format("{}", static_cast<long long>(value));
    else
      json += fmt::format("{}", value);
  }
  return json + "}";
}

std::optional<std::string> tensorboard_tag(const std::string& key) {
  auto ends_with = [&](const std::string& suffix) {
    return key.size() >= suffix.size() && key.compare(key.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (key == "step" || ends_with("_unix_s")) return std::nullopt;
  static const std::pair<const char*, const char*> kGroups[] = {
      {"eval_", "eval/"}, {"sys_", "system/"}, {"peak_rss_", "memory/"}, {"peak_address_", "memory/"}, {"allreduce_", "comm/"}, {"exit_", "run/"}};
  for (const auto& [prefix, group] : kGroups)
    if (key.rfind(prefix, 0) == 0)
      return std::string(group) + (std::string(prefix) == "eval_" || std::string(prefix) == "sys_"
                                       ? key.substr(std::strlen(prefix))
                                       : key);
  if (key.find("_mib") != std::string::npos) return "memory/" + key;  // setup_peak_rss_, activation_, parameter_ ...
  return "train/" + key;
}

MetricsLog::MetricsLog(const std::string& path, const std::string& tensorboard_dir) : path_(path) {
  int fd = open_for_append(path);
  // A line cut short (a crash, a full disk) ends here, on its own: the next record would else be
  // glued to it, and both skipped as one unreadable line.
  char last = '\n';
  {
    std::ifstream in(path, std::ios::binary | std::ios::ate);  // the descriptor is for writing only
    if (in && in.tellg() > 0 && in.seekg(-1, std::ios::end)) in.get(last);
  }
  if (last != '\n' && ::write(fd, "\n", 1) != 1) {
    std::string cause = std::strerror(errno);
    close(fd);
    throw IoError("cannot write metrics to " + path + ": " + cause);
  }
  file_ = fdopen(fd, "a");
  if (!file_) {
    std::string cause = std::strerror(errno);
    close(fd);
    throw IoError("cannot write metrics to " + path + ": " + cause);
  }
  try {
    if (!tensorboard_dir.empty()) events_ = std::make_unique<EventFileWriter>(tensorboard_dir);
  } catch (...) {
    std::fclose(file_);
    throw;
  }
}

MetricsLog::~MetricsLog() { std::fclose(file_); }

void MetricsLog::write(const MetricsRecord& record) {
  std::string line = to_json(record) + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    const int error = errno;
    std::clearerr(file_);
    throw_output_error("cannot write metrics to " + path_ + ": " + std::strerror(error), error);
  }
  if (!events_) return;
  int64_t step = 0;
  bool cut_short = false;
  for (const auto& [name, value] : record) {
    if (name == "step") step = static_cast<int64_t>(value);
    if (name == "eval_interrupted") cut_short = value != 0;
  }
  // An evaluation a stop cut short is no evaluation of the model: TensorBoard draws what the report
  // does (Note [Superseded records] in metrics_reader.cpp), only that it was cut short, and where.
  auto drawn = [&](const std::string& name) {
    return !cut_short || name.rfind("eval_", 0) != 0 || name == "eval_interrupted" || name == "eval_samples";
  };
  write_events([&] {
    for (const auto& [name, value] : record)
      if (auto tag = tensorboard_tag(name); tag && std::isfinite(value) && drawn(name))
        events_->add_scalar(*tag, step, value);
  });
}

void MetricsLog::write_text(const std::string& tag, int64_t step, const std::string& text) {
  if (!events_) return;
  write_events([&] { events_->add_text(tag, step, text); });
}

void MetricsLog::write_events(const std::function<void()>& write) {
  // Rank 0 alone writes events: a failure here must not take it out of a run the others go on
  // with. It is said once, and the run goes on without TensorBoard; metrics.jsonl stays complete.
  try {
    write();
    events_->flush();
  } catch (const std::exception& e) {
    spdlog::warn("TensorBoard events stop here: {}", e.what());
    events_.reset();
  }
}

}  // namespace ddp
