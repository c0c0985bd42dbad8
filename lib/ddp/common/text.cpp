#include "ddp/common/text.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace ddp {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::optional<std::string> nearest(std::string_view word, const std::vector<std::string>& candidates) {
  // Case is no typo's measure: "AdamW" is adamw, not adam; "NCCL" is nccl (was: no guess at all).
  auto lower = [](std::string_view text) {
    std::string folded(text);
    for (char& c : folded) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return folded;
  };
  const std::string folded = lower(word);
  std::optional<std::string> best;
  std::size_t best_distance = 0;
  for (const auto& candidate : candidates) {
    std::size_t d = edit_distance(folded, lower(candidate));
    if (!best || d < best_distance) {
      best = candidate;
      best_distance = d;
    }
  }
  // A typo changes a few characters; beyond a third of the word it is a different word.
  std::size_t limit = std::max<std::size_t>(2, word.size() / 3);
  if (best && best_distance <= limit) return best;
  return std::nullopt;
}

std::vector<std::string> split(std::string_view text, char sep) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    std::size_t end = text.find(sep, start);
    parts.emplace_back(text.substr(start, end - start));
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return parts;
}

std::string number_runs(const std::vector<long long>& ascending, std::size_t most) {
  std::vector<std::string> runs;
  for (std::size_t i = 0; i < ascending.size();) {
    std::size_t j = i;
    while (j + 1 < ascending.size() && ascending[j + 1] == ascending[j] + 1) ++j;
    runs.push_back(std::to_string(ascending[i]) + (j > i ? "-" + std::to_string(ascending[j]) : ""));
    i = j + 1;
  }
  std::string text;
  for (std::size_t r = 0; r < runs.size() && r < most; ++r) text += (r ? ", " : "") + runs[r];
  if (runs.size() > most) text += " (+" + std::to_string(runs.size() - most) + " more)";
  return text;
}

std::optional<long long> parse_int(std::string_view text) {
  long long value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

bool is_hex_number(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text[0]))) text.remove_prefix(1);
  if (!text.empty() && (text[0] == '+' || text[0] == '-')) text.remove_prefix(1);
  return text.size() > 1 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X');
}

std::optional<double> parse_double(std::string_view text) {
  std::string copy(text);
  if (copy.empty() || is_hex_number(copy)) return std::nullopt;
  char* end = nullptr;
  double value = std::strtod(copy.c_str(), &end);
  if (end != copy.c_str() + copy.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

std::string format_shape(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

std::string without_backtrace(const std::string& message) {
  // A TorchScript error puts its tracebacks first and the error itself last ("RuntimeError: ...").
  if (message.find("Traceback of TorchScript") != std::string::npos) {
    std::string last;
    for (const auto& line : split(message, '\n'))
      if (line.find("Error: ") != std::string::npos) last = line;
    if (!last.empty()) {
      last.erase(0, last.find_first_not_of(' '));
      return last;
    }
  }
  std::size_t cut = message.size();
  for (const char* marker : {"\nException raised from ", "\nframe #", " (most recent call first):"})
    cut = std::min(cut, message.find(marker));
  std::string kept = message.substr(0, cut);
  while (!kept.empty() && (kept.back() == '\n' || kept.back() == ' ')) kept.pop_back();
  return kept;
}

std::string printable(std::string_view text, std::size_t limit) {
  std::string out;
  for (char c : text.substr(0, limit)) {
    auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", byte);
      out += escaped;
    } else {
      out += c;
    }
  }
  if (text.size() > limit) out += "...";
  return out;
}

bool is_plain_name(std::string_view name) {
  return !name.empty() && name.front() != '.' && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
}

}  // namespace ddp
