#include "ddp/config/config_value.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <set>

#include "ddp/common/error.h"
#include "ddp/common/text.h"

namespace ddp {
namespace {

std::optional<bool> read_bool_word(std::string_view text) {
  if (text == "true" || text == "True" || text == "TRUE") return true;
  if (text == "false" || text == "False" || text == "FALSE") return false;
  return std::nullopt;
}

// Base 10 with an optional sign; YAML allows a leading '+', from_chars does not.
std::optional<long long> read_int_text(std::string_view text) {
  if (text.size() > 1 && text[0] == '+' && text[1] != '-' && text[1] != '+') text.remove_prefix(1);
  return parse_int(text);
}

bool is_digits(std::string_view text) {
  if (!text.empty() && (text[0] == '+' || text[0] == '-')) text.remove_prefix(1);
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Plain where YAML reads it back as the same string; quoted where it would read as something else.
std::string yaml_string(const std::string& text) {
  static const std::set<std::string> kSpecialWords = {"null", "Null", "NULL", "~",  "yes", "Yes", "YES",
                                                      "no",   "No",   "NO",   "on", "On",  "ON",  "off",
                                                      "Off",  "OFF",  "y",    "n",  "Y",   "N"};
  auto safe = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::string_view("_-./+").find(c) != std::string_view::npos;
  };
  bool plain = !text.empty() && !kSpecialWords.count(text) && !read_bool_word(text) && !parse_double(text) &&
               !read_int_text(text) &&
               (std::isalnum(static_cast<unsigned char>(text[0])) || text[0] == '_' || text[0] == '/') &&
               std::all_of(text.begin(), text.end(), safe);
  return plain ? text : double_quoted(text);
}

[[noreturn]] void type_error(const std::string& path, const std::string& expected, const YAML::Node& node,
                             const std::string& note = "") {
  throw ConfigError(path + ": expected " + expected + ", got " + describe_yaml_value(node) + note);
}

// A hexadecimal number is refused with a hint, as strtod alone would take a float's (0x1p-3).
std::string hex_note(const std::string& text) { return is_hex_number(text) ? " (write it in decimal)" : ""; }

int64_t read_int(const std::string& path, const YAML::Node& node) {
  if (node.IsScalar()) {
    if (auto value = read_int_text(node.Scalar())) return *value;
    if (is_digits(node.Scalar())) type_error(path, "an integer", node, " (out of range)");
    type_error(path, "an integer", node, hex_note(node.Scalar()));
  }
  type_error(path, "an integer", node);
}

// Whether `text` is a number beyond a double's range (1e400): strtod reads all of it as an infinity
// and says ERANGE.
bool overflows_double(const std::string& text) {
  errno = 0;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  return !text.empty() && end == text.c_str() + text.size() && errno == ERANGE && std::isinf(value);
}

// Whether `text` is a number too small for a double (1e-400), which strtod reads as 0: taken, a
// range check would then say "got 0" of a value the user wrote as not 0.
bool underflows_double(const std::string& text, double value) {
  if (value != 0) return false;
  const std::size_t exponent = text.find_first_of("eE");
  const std::string mantissa = text.substr(0, exponent);
  return mantissa.find_first_of("123456789") != std::string::npos;
}

double read_double(const std::string& path, const YAML::Node& node) {
  if (node.IsScalar()) {
    const std::string& text = node.Scalar();
    if (auto value = parse_double(text)) {
      if (underflows_double(text, *value))
        type_error(path, "a number", node, " (out of range: too small, it reads as 0)");
      return *value;
    }
    if (overflows_double(text)) type_error(path, "a number", node, " (out of range)");
    type_error(path, "a number", node, hex_note(text));
  }
  type_error(path, "a number", node);
}

bool read_bool(const std::string& path, const YAML::Node& node) {
  if (node.IsScalar()) {
    if (auto value = read_bool_word(node.Scalar())) return *value;
  }
  type_error(path, "true or false", node);
}

std::string read_string(const std::string& path, const YAML::Node& node) {
  if (node.IsScalar()) return node.Scalar();
  if (node.IsNull()) throw ConfigError(path + ": expected a string, got null (write \"\" for an empty string)");
  type_error(path, "a string", node);
}

std::vector<int64_t> read_int_list(const std::string& path, const YAML::Node& node) {
  if (!node.IsSequence()) type_error(path, "a list of integers like [256, 128]", node);
  std::vector<int64_t> values;
  for (std::size_t i = 0; i < node.size(); ++i) {
    values.push_back(read_int(path + "[" + std::to_string(i) + "]", node[i]));
  }
  return values;
}

}  // namespace

// Shortest text that reads back as exactly the same double, so to_yaml() round-trips.
std::string format_double(double value) {
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return ec == std::errc() ? std::string(buffer, end) : std::to_string(value);
}

std::string double_quoted(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char escape[8];
          std::snprintf(escape, sizeof(escape), "\\x%02x", static_cast<unsigned char>(c));
          out += escape;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string format_value(const ConfigSchema::Target& target) {
  if (auto* p = std::get_if<bool*>(&target)) return **p ? "true" : "false";
  if (auto* p = std::get_if<int64_t*>(&target)) return std::to_string(**p);
  if (auto* p = std::get_if<double*>(&target)) return format_double(**p);
  if (auto* p = std::get_if<std::string*>(&target)) return yaml_string(**p);
  std::vector<std::string> items;
  for (int64_t item : *std::get<std::vector<int64_t>*>(target)) items.push_back(std::to_string(item));
  std::string list;
  for (const auto& item : items) list += (list.empty() ? "" : ", ") + item;
  return "[" + list + "]";
}

std::string value_type_name(const ConfigSchema::Target& target) {
  switch (target.index()) {
    case 0:
      return "bool";
    case 1:
      return "integer";
    case 2:
      return "number";
    case 3:
      return "string";
    default:
      return "list of integers";
  }
}

// How a value the user wrote is echoed in an error: numbers and booleans bare, other text quoted.
std::string describe_yaml_value(const YAML::Node& node) {
  if (node.IsNull()) return "null";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a map";
  const std::string& text = node.Scalar();
  bool bare = node.Tag() != "!" && (parse_double(text) || read_int_text(text) || read_bool_word(text));
  return bare ? text : double_quoted(text);
}

// Reads the whole value before writing, so a failed read leaves the member as it was.
void read_into(const std::string& path, const ConfigSchema::Target& target, const YAML::Node& node) {
  if (auto* p = std::get_if<bool*>(&target))
    **p = read_bool(path, node);
  else if (auto* p = std::get_if<int64_t*>(&target))
    **p = read_int(path, node);
  else if (auto* p = std::get_if<double*>(&target))
    **p = read_double(path, node);
  else if (auto* p = std::get_if<std::string*>(&target))
    **p = read_string(path, node);
  else
    *std::get<std::vector<int64_t>*>(target) = read_int_list(path, node);
}

}  // namespace ddp
