#pragma once
// Reading a run back: metrics.jsonl's records, its config and how it ended, for the report.

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ddp/record/metrics_log.h"

namespace ddp {

/// One run's files, as the report reads them.
struct RunRecords {
  std::string name;  ///< the directory's last component
  std::vector<MetricsRecord> records;
  int skipped_lines = 0;  ///< lines that are no record (a line cut short by a crash)
  int superseded = 0;     ///< records a resume wrote again (Note [Superseded records]), left out
  int interrupted_evals = 0;  ///< evaluations cut short by a stop (eval_interrupted), left out
  std::vector<std::string> non_numeric;  ///< fields with text or true/false values (another version's), left out
  std::string config;     ///< config.yaml's text ("" if missing)

  /// The values of `key` by step, in file order (records without it are left out).
  const std::vector<std::pair<double, double>>& series(const std::string& key) const;
  /// The values of `key` by step as series() gives them, NaN and infinite ones (written as null) too:
  /// what a chart shows, saying which it could not draw.
  std::vector<std::pair<double, double>> points(const std::string& key) const;
  /// The last value of `key`, if any record has it.
  std::optional<double> last(const std::string& key) const;
  /// How the run ended: the exit status in its last record; none while it runs (an exit status
  /// followed by other records is an earlier attempt's, which the run went on from).
  std::optional<double> exit_status() const;
  /// With a failed exit status: a rank that never arrived at the collective rank 0's failure was
  /// (it failed, was killed, or hung), as its count in the store told; none otherwise.
  std::optional<double> never_arrived_rank() const;
  /// The keys that occur, each once, in order of first occurrence.
  std::vector<std::string> keys() const;

 private:
  // Every key's series, made on the first call of series() from all records: the report asks for
  // dozens of keys, and must not scan every record for each (rank 0 writes it while the others wait).
  mutable std::map<std::string, std::vector<std::pair<double, double>>> series_;
  mutable std::size_t indexed_records_ = 0;
};

/// The record of one metrics.jsonl line, its numbers and nulls; nullopt if it is not a JSON object.
/// Fields of another kind (text, true/false, arrays) are left out, their names added to `left_out`.
std::optional<MetricsRecord> parse_metrics_line(const std::string& line, std::vector<std::string>* left_out = nullptr);

/// A run's name: its directory's last component ("." and "run/" too).
std::string read_run_name(const std::string& dir);

/// Reads DIR/metrics.jsonl and DIR/config.yaml; UserError naming the file when it is missing or no
/// file, or has lines but no record, or records but none with a step.
RunRecords read_run(const std::string& dir);

}  // namespace ddp
