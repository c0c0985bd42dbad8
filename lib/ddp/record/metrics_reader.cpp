#include "ddp/record/metrics_reader.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "ddp/common/error.h"

namespace ddp {
namespace {

void skip_spaces(const std::string& s, std::size_t& i) {
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
}

}  // namespace

std::optional<MetricsRecord> parse_metrics_line(const std::string& line) {
  // What to_json writes: {"name": number-or-null, ...}; names need no escapes.
  MetricsRecord record;
  std::size_t i = 0;
  skip_spaces(line, i);
  if (i >= line.size() || line[i++] != '{') return std::nullopt;
  skip_spaces(line, i);
  if (i < line.size() && line[i] == '}') return record;
  while (true) {
    skip_spaces(line, i);
    if (i >= line.size() || line[i++] != '"') return std::nullopt;
    auto close = line.find('"', i);
    if (close == std::string::npos) return std::nullopt;
    std::string name = line.substr(i, close - i);
    i = close + 1;
    skip_spaces(line, i);
    if (i >= line.size() || line[i++] != ':') return std::nullopt;
    skip_spaces(line, i);
    double value;
    if (line.compare(i, 4, "null") == 0) {
      value = std::nan("");
      i += 4;
    } else {
      const char* begin = line.c_str() + i;
      char* end = nullptr;
      value = std::strtod(begin, &end);
      if (end == begin) return std::nullopt;
      i += static_cast<std::size_t>(end - begin);
    }
    record.emplace_back(std::move(name), value);
    skip_spaces(line, i);
    if (i >= line.size()) return std::nullopt;
    char c = line[i++];
    if (c == '}') break;
    if (c != ',') return std::nullopt;
  }
  skip_spaces(line, i);
  return i == line.size() ? std::optional<MetricsRecord>(record) : std::nullopt;
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
        if (name != "step" && std::isfinite(v)) series_[name].emplace_back(*step, v);
    }
    indexed_records_ = records.size();
  }
  static const std::vector<std::pair<double, double>> kNone;
  auto it = series_.find(key);
  return it == series_.end() ? kNone : it->second;
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
