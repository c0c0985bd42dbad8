#include "ddp/data/csv_reader.h"

#include <cfloat>
#include <cmath>
#include <fstream>

#include "ddp/common/error.h"
#include "ddp/common/text.h"
#include "ddp/data/dataset_format.h"

namespace ddp {
namespace {

// Cells split at commas; surrounding spaces and one pair of double quotes are dropped.
std::vector<std::string> split_cells(const std::string& line) {
  std::vector<std::string> cells;
  std::size_t at = 0;
  while (true) {
    auto end = line.find(',', at);
    std::string cell = line.substr(at, end == std::string::npos ? std::string::npos : end - at);
    cell.erase(0, cell.find_first_not_of(" \t"));
    cell.erase(cell.find_last_not_of(" \t\r") + 1);
    if (cell.size() >= 2 && cell.front() == '"' && cell.back() == '"') cell = cell.substr(1, cell.size() - 2);
    cells.push_back(cell);
    if (end == std::string::npos) return cells;
    at = end + 1;
  }
}

}  // namespace

CsvTable read_csv(const std::string& path, const std::string& label_column) {
  std::ifstream in(path);
  if (!in) throw FileError(path + ": cannot open");
  std::string line;
  if (!std::getline(in, line)) throw FileError(path + ": is empty (expected a header row naming the columns)");
  std::vector<std::string> header = split_cells(line);
  std::size_t label_at = header.size();
  for (std::size_t i = 0; i < header.size(); ++i)
    if (header[i] == label_column) label_at = i;
  if (label_at == header.size()) {
    std::string message = path + ": no column \"" + label_column + "\" (data.label_column) in the header";
    if (auto near = nearest(label_column, header)) message += " (did you mean " + *near + "?)";
    throw FileError(message);
  }

  CsvTable table;
  for (std::size_t i = 0; i < header.size(); ++i)
    if (i != label_at) table.feature_names.push_back(header[i]);
  std::vector<float> features;
  std::vector<double> labels;
  int64_t line_number = 1;
  while (std::getline(in, line)) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank lines, e.g. at the end
    std::vector<std::string> cells = split_cells(line);
    if (cells.size() != header.size())
      throw FileError(path + ":" + std::to_string(line_number) + ": " + std::to_string(cells.size()) +
                      " cells, but the header has " + std::to_string(header.size()));
    for (std::size_t i = 0; i < cells.size(); ++i) {
      const std::string& cell = cells[i];
      std::optional<double> value = parse_double(cell);
      if (!value)
        throw FileError(path + ":" + std::to_string(line_number) + ": column " + std::to_string(i + 1) + " (\"" +
                        header[i] + "\"): " + (cell.empty() ? "empty cell" : "\"" + cell + "\" is not a finite number"));
      if (i == label_at) {
        labels.push_back(*value);
      } else {
        if (std::abs(*value) > FLT_MAX)  // finite as a double, infinite as the float32 it trains as
          throw FileError(path + ":" + std::to_string(line_number) + ": column " + std::to_string(i + 1) + " (\"" +
                          header[i] + "\"): \"" + cell + "\" is beyond float32's range");
        features.push_back(static_cast<float>(*value));
      }
    }
  }
  if (labels.empty()) throw FileError(path + ": has a header but no rows");
  const auto rows = static_cast<int64_t>(labels.size());
  table.labels = torch::tensor(labels, torch::kDouble);
  table.features = torch::tensor(features, torch::kFloat).reshape({rows, static_cast<int64_t>(header.size()) - 1});
  return table;
}

void register_csv_format(DatasetFormats& formats) {
  formats["csv"].load_splits = [](const DataConfig& config, int64_t) {
    return load_file_splits(config, [&config](const std::string& path, const std::string&) {
      CsvTable table = read_csv(path, config.label_column);
      Dataset data;
      data.features = table.features;
      data.labels = table.labels;  // float64: the task decides whether they are classes
      data.source = path;
      return data;
    });
  };
}

}  // namespace ddp
