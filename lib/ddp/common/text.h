#pragma once
// Small string helpers shared by the launcher and the trainer.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddp {

/// Levenshtein distance, for "did you mean ...?" hints.
std::size_t edit_distance(std::string_view a, std::string_view b);

/// The candidate closest to `word`, if any is close enough to be a plausible typo.
std::optional<std::string> nearest(std::string_view word, const std::vector<std::string>& candidates);

/// Splits on `sep`, keeping empty pieces.
std::vector<std::string> split(std::string_view text, char sep);

/// Ascending numbers as runs, "1-3, 5, 7-1048575": at most `most` runs, then "(+N more)".
std::string number_runs(const std::vector<long long>& ascending, std::size_t most = 20);

/// Parses a whole string as a base-10 integer; nullopt on any junk or overflow.
std::optional<long long> parse_int(std::string_view text);

/// Parses a whole string as a finite decimal double; nullopt on junk. Hexadecimal ("0x1p-3", which
/// strtod takes) is junk too, as it is for parse_int and for Python's float().
std::optional<double> parse_double(std::string_view text);

/// Whether `text` is written in hexadecimal ("0x10", "-0X1p-3"), which no number reader here takes.
bool is_hex_number(std::string_view text);

/// An error message without the C++ backtrace LibTorch appends ("Exception raised from ...",
/// "frame #0: ...") or, for a TorchScript error, only its last "...Error: ..." line: what to show a user.
std::string without_backtrace(const std::string& message);

/// `text` safe for a terminal: control characters (escape sequences, newlines) become \xNN, and at
/// most `limit` bytes are kept. For text from outside, such as another node's failure report.
std::string printable(std::string_view text, std::size_t limit = 1000);

/// Whether `name` may name a file or directory of its own inside another: letters, digits, '-', '_'
/// and '.', not empty and not starting with '.' (so never "." or "..").
bool is_plain_name(std::string_view name);

/// A tensor shape as Python prints a list: "[60000, 1, 28, 28]".
std::string format_shape(const std::vector<int64_t>& shape);

}  // namespace ddp
