#pragma once
// metrics.jsonl: one JSON object per line for every log and eval event (rank 0 only).

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace ddp {

/// A flat JSON record: names and numbers, in order.
using MetricsRecord = std::vector<std::pair<std::string, double>>;

/// Appends records to a JSONL file, flushed per line so a crash loses at most the line in progress.
class MetricsLog {
 public:
  /// Opens `path` for appending (a resumed run continues the same file); FileError when it cannot.
  explicit MetricsLog(const std::string& path);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  /// Appends one record as one line.
  void write(const MetricsRecord& record);

 private:
  std::FILE* file_ = nullptr;
};

/// The JSON text of one record: integers without a fraction, other numbers in shortest round-trip form.
std::string to_json(const MetricsRecord& record);

}  // namespace ddp
