#pragma once
// A value from a run's metrics.jsonl, as the end-to-end tests read it.

#include <fstream>
#include <regex>
#include <string>
#include <vector>

namespace ddp::test {

/// The first (`last` false) or last value of `key` in the metrics file `path`; -1 when absent.
inline double metric_value(const std::string& path, const std::string& key, bool last = true) {
  std::ifstream in(path);
  std::string line;
  double value = -1;
  std::regex field("\"" + key + "\": ([-0-9.e+]+)");
  std::smatch match;
  while (std::getline(in, line))
    if (std::regex_search(line, match, field)) {
      value = std::stod(match[1]);
      if (!last) return value;
    }
  return value;
}

/// Every value of `key` in the metrics file `path`, in order.
inline std::vector<double> metric_values(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  std::vector<double> values;
  std::regex field("\"" + key + "\": ([-0-9.e+]+)");
  std::smatch match;
  while (std::getline(in, line))
    if (std::regex_search(line, match, field)) values.push_back(std::stod(match[1]));
  return values;
}

}  // namespace ddp::test
