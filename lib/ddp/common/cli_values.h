#pragma once
// Option values read as --set reads them. Integers: base 10, whole, in range; CLI11's own reading
// takes 010 for 8 (octal) and 0x10 for 16, where torchrun says 10 and refuses 0x10, and its range
// check calls "3x" out of range rather than no integer. Numbers: decimal, in range, in the same
// words; CLI::Range lets "nan" through and says "Value -1 not in range 0.000000 to 100.000000".
// Paths: an empty one is refused, not taken for the option's default ("-o $OUT" with OUT unset).

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "ddp/common/text.h"

namespace ddp {

/// A whole base-10 integer in [low, high], the text rewritten without leading zeros so that CLI11's
/// conversion after it reads the same number: for ->transform(), since ->check() drops the rewrite.
/// The help shows the range after the option's type unless `in_help` is false.
inline CLI::Validator integer_in(long long low, long long high, bool in_help = true) {
  return CLI::Validator(
      [low, high](std::string& text) -> std::string {
        const auto value = parse_int(text);
        const auto digits = text.find_first_not_of("0123456789", text.starts_with('-') ? 1 : 0);
        const bool too_long = !value && digits == std::string::npos && text.size() > (text[0] == '-' ? 1u : 0u);
        if (!value && !too_long) return "expected a base-10 integer, got '" + text + "'";
        if (too_long || *value < low || *value > high)
          return "expected an integer in [" + std::to_string(low) + ", " + std::to_string(high) + "], got " + text;
        text = std::to_string(*value);
        return "";
      },
      in_help ? "in [" + std::to_string(low) + ", " + std::to_string(high) + "]" : "");
}

/// A finite decimal number in [low, high] (parse_double: no NaN, no hexadecimal).
inline CLI::Validator number_in(double low, double high) {
  auto bound = [](double value) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", value);
    return std::string(text);
  };
  return CLI::Validator(
      [low, high, bound](std::string& text) -> std::string {
        const auto value = parse_double(text);
        if (!value) return "expected a number, got '" + text + "'";
        if (*value < low || *value > high)
          return "expected a number in [" + bound(low) + ", " + bound(high) + "], got " + text;
        return "";
      },
      "in [" + bound(low) + ", " + bound(high) + "]");
}

/// A value that is not empty: an option given an empty one ("--tokenizer $TOK" with TOK unset)
/// would otherwise be taken for the option left out, its default.
inline CLI::Validator not_empty() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        return text.empty() ? "expected a value, got an empty one (leave the option out for its default)" : "";
      },
      "");
}

}  // namespace ddp
