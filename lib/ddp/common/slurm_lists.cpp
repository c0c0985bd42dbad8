#include "ddp/common/slurm_lists.h"

#include <cstdint>

#include "ddp/common/error.h"
#include "ddp/common/text.h"

namespace ddp {
namespace {

constexpr std::size_t kMaxHosts = 1 << 20;  // far above any cluster; bounds a hostile "[0-999999999]"

[[noreturn]] void fail(std::string_view list, const std::string& cause) {
  throw UserError("Slurm list \"" + printable(list, 200) + "\": " + cause);
}

// Splits at the commas outside brackets.
std::vector<std::string> top_level_items(std::string_view list) {
  std::vector<std::string> items;
  std::string current;
  int depth = 0;
  for (char c : list) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (depth < 0) fail(list, "']' without '['");
    if (c == ',' && depth == 0) {
      items.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  if (depth != 0) fail(list, "'[' without ']'");
  items.push_back(current);
  return items;
}

int64_t parse_bound(std::string_view list, const std::string& text) {
  auto value = parse_int(text);
  if (!value || *value < 0 || text.empty() || text.front() == '+' || text.front() == '-')
    fail(list, "\"" + text + "\" is not a number in a range");
  return *value;
}

// One item, e.g. "rack1-n[001-003]" or "x[1-2]y[3-4]", appended to `out`.
void expand_item(std::string_view list, const std::string& item, std::vector<std::string>& out) {
  auto open = item.find('[');
  if (open == std::string::npos) {
    if (item.empty()) fail(list, "an empty host name");
    out.push_back(item);
    return;
  }
  auto close = item.find(']', open);
  std::string prefix = item.substr(0, open);
  std::vector<std::string> tails;
  std::string rest = item.substr(close + 1);
  // Slurm takes text after brackets only before more brackets ("x[1-2]y[3-4]", not "a[1-2]b").
  if (!rest.empty() && rest.find('[') == std::string::npos) fail(list, "text after the last ']' in " + item);
  if (rest.empty())
    tails.push_back("");
  else
    expand_item(list, rest, tails);
  for (const auto& range : split(item.substr(open + 1, close - open - 1), ',')) {
    auto dash = range.find('-');
    std::string low = range.substr(0, dash);
    std::string high = dash == std::string::npos ? low : range.substr(dash + 1);
    int64_t from = parse_bound(list, low), to = parse_bound(list, high);
    if (to < from) fail(list, "the range " + range + " runs backwards");
    // Bounded before multiplying, so that nothing here can overflow.
    if (to - from >= static_cast<int64_t>(kMaxHosts) ||
        static_cast<std::size_t>(to - from + 1) * tails.size() + out.size() > kMaxHosts)
      fail(list, "more than " + std::to_string(kMaxHosts) + " hosts");
    for (int64_t n = from; n <= to; ++n) {
      std::string number = std::to_string(n);
      if (number.size() < low.size()) number.insert(0, low.size() - number.size(), '0');  // keep the padding
      for (const auto& tail : tails) out.push_back(prefix + number + tail);
    }
  }
}

}  // namespace

std::vector<std::string> expand_hostlist(std::string_view list) {
  if (list.empty()) fail(list, "empty");
  std::vector<std::string> hosts;
  for (const auto& item : top_level_items(list))
    if (!item.empty()) expand_item(list, item, hosts);  // "a,,b" is a, b, as for scontrol
  if (hosts.empty()) fail(list, "no host");
  return hosts;
}

std::vector<int> expand_counts(std::string_view list) {
  if (list.empty()) fail(list, "empty");
  std::vector<int> counts;
  for (const auto& item : split(list, ',')) {
    // "N" or "N(xR)": N repeated R times.
    auto paren = item.find('(');
    std::string count = item.substr(0, paren);
    int64_t repeat = 1;
    if (paren != std::string::npos) {
      if (item.size() < paren + 4 || item.compare(paren, 2, "(x") != 0 || item.back() != ')')
        fail(list, "\"" + item + "\" is not N or N(xR)");
      auto times = parse_int(item.substr(paren + 2, item.size() - paren - 3));
      if (!times || *times < 1) fail(list, "\"" + item + "\" repeats a non-positive number of times");
      repeat = *times;
    }
    auto value = parse_int(count);
    if (!value || *value < 0 || *value > INT32_MAX) fail(list, "\"" + count + "\" is not a count");
    if (counts.size() + static_cast<std::size_t>(repeat) > kMaxHosts) fail(list, "more than " + std::to_string(kMaxHosts) + " entries");
    counts.insert(counts.end(), static_cast<std::size_t>(repeat), static_cast<int>(*value));
  }
  return counts;
}

int slurm_master_port(long long job_id, const char* step_id) {
  // A step id that is no number (none: the batch script) counts as 0. 1009 is prime to 10000: the
  // steps of one job differ until 10000 of them.
  auto step = step_id ? parse_int(step_id) : std::nullopt;
  const long long s = step && *step >= 0 ? *step % 10000 : 0;
  return 20000 + static_cast<int>((job_id % 10000 + 1009 * s) % 10000);
}

}  // namespace ddp
