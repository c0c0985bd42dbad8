#include "ddp/data/csv_reader.h"

#include <cfloat>
#include <cmath>
#include <fstream>
#include <limits>
#include <optional>
#include <utility>
#include <unordered_map>

#include "ddp/common/atomic_file.h"
#include "ddp/common/error.h"
#include "ddp/common/text.h"
#include "ddp/data/csv_line.h"
#include "ddp/data/dataset_format.h"

namespace ddp {
namespace {

// A header names its columns; its line may be long (many columns), not unbounded.
constexpr std::size_t kMaxHeaderBytes = 4 << 20;
// A row holds numbers: generous room for each of the header's cells, and no more. A line past
// this is refused before it is split (a 100 MB line once took 2.4 GB as cells).
constexpr std::size_t kRowBaseBytes = 1 << 20, kRowBytesPerCell = 256;

// A header without the label column is often a file that is not UTF-8 comma-separated lines:
// name what it looks like instead, so that the fix is plain.
std::string header_hint(const std::vector<std::string>& header) {
  for (const auto& cell : header) {
    if (cell.find('\0') != std::string::npos) return "; its header holds NUL bytes: is it UTF-16? Save it as UTF-8";
    if (cell.find('\r') != std::string::npos)
      return "; its header runs past a carriage return: are its lines ended by CR alone (old Mac)? End them with "
             "newlines";
  }
  if (header.size() == 1)
    for (auto [separator, name] : {std::pair{'\t', "tabs"}, std::pair{';', "semicolons"}, std::pair{'|', "'|'"}})
      if (header[0].find(separator) != std::string::npos)
        return std::string("; the header is one column holding ") + name +
               ": the file seems separated by those, and ddprun reads comma-separated values";
  return "";
}

// The header's names, unquoted; refuses a name given twice, which would leave the label column
// ambiguous (one "label" read as the labels, the other as a feature).
std::vector<std::string> read_csv_header(CsvLineReader& lines, const std::string& path) {
  std::string line;
  if (!lines.next(line, kMaxHeaderBytes, "a header row names the columns; is this a CSV file?"))
    throw FileError(path + ": is empty (expected a header row naming the columns)");
  if (line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);  // a UTF-8 byte-order mark, as Excel writes
  std::vector<CsvCell> cells;
  split_csv_line(line, cells, std::numeric_limits<std::size_t>::max(), lines.where());
  std::vector<std::string> header;
  std::unordered_map<std::string, std::size_t> seen;
  for (const auto& cell : cells) {
    header.push_back(cell.value());
    auto [first, fresh] = seen.emplace(header.back(), header.size());
    if (!fresh)
      throw FileError(lines.where() + ": column \"" + header.back() + "\" appears twice, as columns " +
                      std::to_string(first->second) + " and " + std::to_string(header.size()) +
                      (header_hint(header).empty() ? "; give each column its own name" : header_hint(header)));
  }
  return header;
}

// The columns of `names` in the order of `wanted`, or a FileError naming what differs: an eval
// file's features are the training file's columns by name, whatever their order there.
std::vector<int64_t> columns_by_name(const std::vector<std::string>& names, const std::vector<std::string>& wanted,
                                     const std::string& path, const std::string& wanted_path) {
  std::unordered_map<std::string, int64_t> at;
  for (std::size_t i = 0; i < names.size(); ++i) at.emplace(names[i], static_cast<int64_t>(i));
  std::vector<int64_t> order;
  std::string missing, extra;
  for (const auto& name : wanted) {
    auto found = at.find(name);
    if (found == at.end()) {
      missing += (missing.empty() ? "\"" : ", \"") + name + "\"";
    } else {
      order.push_back(found->second);
      at.erase(found);
    }
  }
  for (const auto& name : names)
    if (at.count(name)) extra += (extra.empty() ? "\"" : ", \"") + name + "\"";
  if (!missing.empty() || !extra.empty())
    throw FileError(path + ": its feature columns are not " + wanted_path + "'s" +
                    (missing.empty() ? "" : "; it lacks " + missing) + (extra.empty() ? "" : "; it has " + extra) +
                    " (the model takes the training file's columns, by name)");
  return order;
}

}  // namespace

CsvTable read_csv(const std::string& path, const std::string& label_column) {
  require_regular_file(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FileError(path + ": cannot open");
  if (in.peek() == 0x1f) {  // gzip's magic 1f 8b, which read as a header of NUL bytes, "UTF-16?"
    in.get();
    if (in.peek() == 0x8b) throw FileError(path + ": is gzip-compressed; decompress it first (gunzip -k)");
    in.seekg(0);
  }
  CsvLineReader lines(in, path);
  std::vector<std::string> header = read_csv_header(lines, path);
  std::size_t label_at = header.size();
  for (std::size_t i = 0; i < header.size(); ++i)
    if (header[i] == label_column) label_at = i;
  if (label_at == header.size()) {
    std::string message = path + ": no column \"" + label_column + "\" (data.label_column) in the header";
    if (auto near = nearest(label_column, header)) message += " (did you mean " + *near + "?)";
    message += header_hint(header);
    throw FileError(message);
  }

  CsvTable table;
  for (std::size_t i = 0; i < header.size(); ++i)
    if (i != label_at) table.feature_names.push_back(header[i]);
  const std::size_t max_row_bytes = kRowBaseBytes + kRowBytesPerCell * header.size();
  const std::string row_bound = "1 MiB plus " + std::to_string(kRowBytesPerCell) + " per column of the header; a row " +
                                "of numbers is far shorter: is a newline missing, or is this another kind of file?";
  std::vector<float> features;
  std::vector<double> labels;
  std::vector<CsvCell> cells;
  std::string line;
  while (lines.next(line, max_row_bytes, row_bound)) {
    if (line.find_first_not_of(" \t") == std::string::npos) continue;  // blank lines, e.g. at the end
    const std::string where = lines.where();
    std::size_t count = split_csv_line(line, cells, header.size(), where);
    if (count != header.size())
      throw FileError(where + ": " + std::to_string(count) + " cells, but the header has " + std::to_string(header.size()));
    for (std::size_t i = 0; i < cells.size(); ++i) {
      const std::string cell = cells[i].value();
      std::optional<double> value = parse_double(cell);
      if (!value)
        throw FileError(where + ": column " + std::to_string(i + 1) + " (\"" + header[i] +
                        "\"): " + (cell.empty() ? "empty cell" : "\"" + cell + "\" is not a finite number"));
      if (i == label_at) {
        labels.push_back(*value);
      } else {
        if (std::abs(*value) > FLT_MAX)  // finite as a double, infinite as the float32 it trains as
          throw FileError(where + ": column " + std::to_string(i + 1) + " (\"" + header[i] + "\"): \"" + cell +
                          "\" is beyond float32's range");
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
  formats.add("csv").load_splits = [](const DataConfig& config, int64_t) {
    // The training file is read first; the eval file's columns are taken by its names, which a
    // table exported again may order otherwise (by position, each feature would feed another input).
    std::optional<std::vector<std::string>> train_names;
    return load_file_splits(config, [&config, &train_names](const std::string& path, const std::string&) {
      CsvTable table = read_csv(path, config.label_column);
      if (!train_names) {
        train_names = table.feature_names;
      } else if (table.feature_names != *train_names) {
        auto order = columns_by_name(table.feature_names, *train_names, path, config.path);
        table.features = table.features.index_select(1, torch::tensor(order, torch::kLong)).contiguous();
      }
      Dataset data;
      data.features = table.features;
      data.labels = table.labels;  // float64: the task decides whether they are classes
      data.source = path;
      return data;
    });
  };
}

}  // namespace ddp
