#include "ddp/data/criteo_file.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string_view>
#include <vector>

#include "ddp/common/atomic_file.h"
#include "ddp/common/error.h"
#include "ddp/data/dataset_format.h"

namespace ddp {
namespace {

constexpr int64_t kFields = 1 + kCriteoDense + kCriteoCategorical;

// Parses all of `text` as an integer in `base`; false for anything else (an empty field is missing,
// which the caller handles first).
template <typename T>
bool parse_whole(std::string_view text, T& value, int base) {
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  return error == std::errc() && end == text.data() + text.size();
}

}  // namespace

Dataset read_criteo_file(const std::string& path) {
  const std::string text = read_whole_file(path);
  std::vector<double> features;  // per line: the 13 log counts, then the 26 hashes
  std::vector<float> labels;
  std::string_view rest(text);
  int64_t line_number = 0;
  auto fault = [&](const std::string& what) {
    return FileError(path + " line " + std::to_string(line_number) + ": " + what);
  };
  std::string_view fields[kFields];
  while (!rest.empty()) {
    ++line_number;
    std::size_t newline = rest.find('\n');
    const bool ended = newline != std::string_view::npos;
    std::string_view line = rest.substr(0, ended ? newline : rest.size());
    rest.remove_prefix(ended ? newline + 1 : rest.size());
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    // Criteo's files end each line, the last too: one cut short may still have 40 fields, the last
    // of them cut (a hash of 4 digits), so an unended line is refused whatever it holds.
    if (!ended) throw fault("the file ends inside this line, so it looks truncated (Criteo's layout ends every line)");
    if (line.empty()) throw fault("an empty line, where Criteo's layout has an impression on every line");
    int64_t count = 0;
    for (std::size_t start = 0;;) {
      std::size_t tab = line.find('\t', start);
      if (count < kFields) fields[count] = line.substr(start, tab == std::string_view::npos ? line.npos : tab - start);
      ++count;
      if (tab == std::string_view::npos) break;
      start = tab + 1;
    }
    if (count != kFields)
      throw fault(std::to_string(count) + " fields where Criteo's layout has " + std::to_string(kFields) +
                  " (the label, 13 counts, 26 categorical values, tab-separated)" +
                  (line_number == 1 && text.rfind("\x1f\x8b", 0) == 0 ? "; it is gzip-compressed: decompress it first" : ""));
    if (fields[0] != "0" && fields[0] != "1")
      throw fault("the label is '" + std::string(fields[0]) + "', expected 0 or 1");
    labels.push_back(fields[0] == "1" ? 1.0f : 0.0f);
    for (int64_t j = 0; j < kCriteoDense; ++j) {
      std::string_view field = fields[1 + j];
      int64_t value = 0;
      if (!field.empty() && !parse_whole(field, value, 10))
        throw fault("count I" + std::to_string(j + 1) + " is '" + std::string(field) +
                    "', expected an integer of at most 64 bits");
      features.push_back(std::log1p(static_cast<double>(std::max<int64_t>(value, 0))));
    }
    for (int64_t j = 0; j < kCriteoCategorical; ++j) {
      std::string_view field = fields[1 + kCriteoDense + j];
      uint32_t value = 0;
      if (!field.empty() && (field.size() > 8 || !parse_whole(field, value, 16)))
        throw fault("categorical C" + std::to_string(j + 1) + " is '" + std::string(field) +
                    "', expected a 32-bit hash in hexadecimal (at most 8 digits)");
      features.push_back(static_cast<double>(value));
    }
  }
  if (labels.empty()) throw FileError(path + ": holds no impressions (Criteo's layout: one per line)");
  const auto n = static_cast<int64_t>(labels.size());
  Dataset data;
  data.source = path;
  data.features = torch::from_blob(features.data(), {n, kCriteoDense + kCriteoCategorical}, torch::kDouble).clone();
  data.labels = torch::from_blob(labels.data(), {n, 1}, torch::kFloat).clone();
  return data;
}

void register_criteo_format(DatasetFormats& formats) {
  formats.add("criteo").load_splits = [](const DataConfig& config, int64_t) {
    return load_file_splits(config, [](const std::string& path, const std::string&) { return read_criteo_file(path); });
  };
}

}  // namespace ddp
