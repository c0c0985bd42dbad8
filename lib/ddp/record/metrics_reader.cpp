#include "ddp/record/metrics_reader.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "ddp/common/error.h"

namespace ddp {

std::optional<MetricsRecord> parse_metrics_line(const std::string& line) {
  // nlohmann's ordered object keeps the file's key order, which the report's columns follow.
  auto json = nlohmann::ordered_json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) return std::nullopt;  // a discarded parse (a line cut short) is no object either
  MetricsRecord record;
  for (const auto& [name, value] : json.items()) {
    if (value.is_null())
      record.emplace_back(name, std::nan(""));
    else if (value.is_number())
      record.emplace_back(name, value.get<double>());
    else
      return std::nullopt;
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

RunRecords read_run(const std::string& dir) {
  RunRecords run;
  run.name = std::filesystem::path(dir).lexically_normal().filename().string();
  if (run.name.empty()) run.name = std::filesystem::path(dir).lexically_normal().parent_path().filename().string();
  std::string path = dir + "/metrics.jsonl";
  std::ifstream in(path);
  if (!in) throw UserError("no run in " + dir + ": cannot read " + path);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    if (auto record = parse_metrics_line(line))
      run.records.push_back(std::move(*record));
    else
      ++run.skipped_lines;
  }
  std::ifstream config(dir + "/config.yaml");
  std::ostringstream text;
  text << config.rdbuf();
  run.config = text.str();
  return run;
}

}  // namespace ddp
