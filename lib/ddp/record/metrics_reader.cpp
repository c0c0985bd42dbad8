#include "ddp/record/metrics_reader.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "ddp/common/error.h"

namespace ddp {

std::optional<MetricsRecord> parse_metrics_line(const std::string& line, std::vector<std::string>* left_out) {
  // nlohmann's ordered object keeps the file's key order, which the report's columns follow.
  auto json = nlohmann::ordered_json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) return std::nullopt;  // a discarded parse (a line cut short) is no object either
  MetricsRecord record;
  for (const auto& [name, value] : json.items()) {
    if (value.is_null())
      record.emplace_back(name, std::nan(""));
    else if (value.is_number())
      record.emplace_back(name, value.get<double>());
    else if (left_out)  // another version's text or flag: its numbers still count
      left_out->push_back(name);
  }
  return record;
}

const std::vector<std::pair<double, double>>& RunRecords::series(const std::string& key) const {
  if (indexed_records_ != records.size()) {
    series_.clear();
    for (const auto& record : records) {
      std::optional<double> step;
      for (const auto& [name, v] : record)
        if (name == "step") step = v;
      if (!step) continue;
      for (const auto& [name, v] : record)
        if (std::isfinite(v)) series_[name].emplace_back(*step, v);  // "step" too: the last step is its last value
    }
    indexed_records_ = records.size();
  }
  static const std::vector<std::pair<double, double>> kNone;
  auto it = series_.find(key);
  return it == series_.end() ? kNone : it->second;
}

std::vector<std::pair<double, double>> RunRecords::points(const std::string& key) const {
  std::vector<std::pair<double, double>> found;
  for (const auto& record : records) {
    std::optional<double> step, value;
    for (const auto& [name, v] : record) {
      if (name == "step") step = v;
      if (name == key) value = v;
    }
    if (step && value) found.emplace_back(*step, *value);
  }
  return found;
}

std::optional<double> RunRecords::last(const std::string& key) const {
  const auto& points = series(key);
  if (points.empty()) return std::nullopt;
  return points.back().second;
}

std::vector<std::string> RunRecords::keys() const {
  std::vector<std::string> keys;
  std::set<std::string> seen;
  for (const auto& record : records)
    for (const auto& [name, value] : record)
      if (seen.insert(name).second) keys.push_back(name);
  return keys;
}

std::optional<double> RunRecords::exit_status() const {
  if (records.empty()) return std::nullopt;
  for (const auto& [key, value] : records.back())
    if (key == "exit_status") return value;
  return std::nullopt;
}

std::optional<double> RunRecords::never_arrived_rank() const {
  if (!exit_status()) return std::nullopt;
  for (const auto& [key, value] : records.back())
    if (key == "never_arrived_rank") return value;
  return std::nullopt;
}

std::string read_run_name(const std::string& dir) {
  // Absolute first: "." and "run/" are named by the directory they are.
  const std::filesystem::path whole = std::filesystem::absolute(dir).lexically_normal();
  const std::string name = whole.filename().string();
  return name.empty() ? whole.parent_path().filename().string() : name;
}

RunRecords read_run(const std::string& dir) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(dir, ec)) {  // metrics.jsonl itself, say
    const std::string parent = std::filesystem::path(dir).parent_path().string();
    throw UserError(dir + " is a file: ddp-report reads run directories (the one that holds it: " +
                    (parent.empty() ? "." : parent) + ")");
  }
  RunRecords run;
  run.name = read_run_name(dir);
  std::string path = dir + "/metrics.jsonl";
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec))
    throw UserError("no run in " + dir + ": " + path + " is not a file (" +
                    (std::filesystem::is_directory(path, ec) ? "a directory" : "not a regular file") + ")");
  std::ifstream in(path);
  if (!in) throw UserError("no run in " + dir + ": cannot read " + path);
  // Note [Superseded records]: a resumed run appends from its checkpoint's step, after what the
  // attempt before it wrote past that step (a crash loses the steps since the last checkpoint, and
  // they are trained again). A record whose step is below the last kept one's, or an attempt's
  // first (first_step_unix_s, at the first step it trains) at or below it, supersedes every kept
  // record of its step or later, so that no step is shown twice. An evaluation a stop cut short
  // (eval_interrupted) is no evaluation of the model: left out too, and counted.
  auto step_of = [](const MetricsRecord& record) -> std::optional<double> {
    for (const auto& [key, value] : record)
      if (key == "step") return value;
    return std::nullopt;
  };
  std::optional<double> last_step;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    std::vector<std::string> left_out;
    auto record = parse_metrics_line(line, &left_out);
    for (auto& name : left_out)
      if (std::find(run.non_numeric.begin(), run.non_numeric.end(), name) == run.non_numeric.end())
        run.non_numeric.push_back(std::move(name));
    if (!record || record->empty()) {  // no object, or none of its fields a number
      ++run.skipped_lines;
      continue;
    }
    if (std::any_of(record->begin(), record->end(),
                    [](const auto& entry) { return entry.first == "eval_interrupted" && entry.second != 0; })) {
      ++run.interrupted_evals;
      continue;
    }
    const auto step = step_of(*record);
    const bool starts_attempt = std::any_of(record->begin(), record->end(),
                                            [](const auto& entry) { return entry.first == "first_step_unix_s"; });
    if (step && last_step && (*step < *last_step || (starts_attempt && *step <= *last_step))) {
      const std::size_t before = run.records.size();
      run.records.erase(std::remove_if(run.records.begin(), run.records.end(),
                                       [&](const MetricsRecord& kept) {
                                         const auto at = step_of(kept);
                                         return at && *at >= *step;
                                       }),
                        run.records.end());
      run.superseded += static_cast<int>(before - run.records.size());
    }
    if (step) last_step = step;
    run.records.push_back(std::move(*record));
  }
  // Lines, but none a record, or records with no step to chart them by: another program's file, or
  // another version's, whose page would only say "no data" everywhere.
  if (run.records.empty() && run.skipped_lines > 0)
    throw UserError(path + ": none of its " + std::to_string(run.skipped_lines) +
                    " line(s) is a metrics record (a JSON object of numbers a line, as ddp-train writes)");
  if (!run.records.empty() && !last_step)
    throw UserError(path + ": none of its " + std::to_string(run.records.size()) +
                    " record(s) has a \"step\", by which the report charts them; it was not written by ddp-train");
  std::ifstream config(dir + "/config.yaml");
  std::ostringstream text;
  text << config.rdbuf();
  run.config = text.str();
  return run;
}

}  // namespace ddp
