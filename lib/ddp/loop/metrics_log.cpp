#include "ddp/loop/metrics_log.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <spdlog/fmt/fmt.h>

#include "ddp/common/atomic_file.h"
#include "ddp/common/error.h"

namespace ddp {

std::string to_json(const MetricsRecord& record) {
  std::string json = "{";
  for (const auto& [name, value] : record) {
    if (json.size() > 1) json += ", ";
    json += "\"" + name + "\": ";
    if (!std::isfinite(value))
      json += "null";
    else if (value == std::floor(value) && std::fabs(value) < 1e15)
      json += fmt::format("{}", static_cast<long long>(value));
    else
      json += fmt::format("{}", value);
  }
  return json + "}";
}

MetricsLog::MetricsLog(const std::string& path) {
  int fd = open_for_append(path);
  file_ = fdopen(fd, "a");
  if (!file_) {
    std::string cause = std::strerror(errno);
    close(fd);
    throw IoError("cannot write metrics to " + path + ": " + cause);
  }
}

MetricsLog::~MetricsLog() { std::fclose(file_); }

void MetricsLog::write(const MetricsRecord& record) {
  std::string line = to_json(record) + "\n";
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fflush(file_);
}

}  // namespace ddp
