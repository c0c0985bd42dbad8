#pragma once
// metrics.jsonl: one JSON object per line for every log and eval event (rank 0 only), and the same
// numbers as TensorBoard scalars.

#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ddp {

/// A flat JSON record: names and numbers, in order.
using MetricsRecord = std::vector<std::pair<std::string, double>>;

class EventFileWriter;

/// Appends records to a JSONL file, flushed per line so a crash loses at most the line in progress,
/// and, given a TensorBoard directory, each number of a record to the scalar series of its tag.
class MetricsLog {
 public:
  /// Opens `path` for appending (a resumed run continues the same file) and, unless
  /// `tensorboard_dir` is empty, a new event file there; FileError or IoError when it cannot.
  MetricsLog(const std::string& path, const std::string& tensorboard_dir);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  /// Appends one record as one line; its "step" is the scalars' step. IoError when the line cannot
  /// be written (a full disk): a run that went on would keep no record of what it trained.
  void write(const MetricsRecord& record);

  /// Text for TensorBoard's text tab (nothing without TensorBoard).
  void write_text(const std::string& tag, int64_t step, const std::string& text);

 private:
  void write_events(const std::function<void()>& write);

  std::string path_;
  std::FILE* file_ = nullptr;
  std::unique_ptr<EventFileWriter> events_;
};

/// The TensorBoard tag of a metrics.jsonl key ("loss" → "train/loss", "eval_accuracy" →
/// "eval/accuracy"), or nullopt for keys that are no series (the step, wall-clock timestamps).
std::optional<std::string> tensorboard_tag(const std::string& key);

/// The JSON text of one record: integers without a fraction, other numbers in shortest round-trip form.
std::string to_json(const MetricsRecord& record);

}  // namespace ddp
