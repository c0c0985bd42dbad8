#pragma once
// CSV lines as RFC 4180 writes them, read within a bound: a line is read only up to a limit the
// caller sets (a 100 MB line is refused after its first megabyte, not split into 50 million
// cells), and split into views of itself, at most as many as the header has cells.
//
// Quoted cells may hold commas and doubled quotes ("" is one "); spaces around a cell, quoted or
// not, are dropped. A quoted cell that holds a newline is refused: its line ends inside the quotes
// ("not closed on its line"), since a table of numbers has no use for one.

#include <cstddef>
#include <cstdint>
#include <istream>
#include <string>
#include <string_view>
#include <vector>

namespace ddp {

/// Lines of a CSV file, each read without its "\n" or "\r\n", and never more than a bound.
class CsvLineReader {
 public:
  /// Reads `in`, naming `path` in errors.
  CsvLineReader(std::istream& in, std::string path) : in_(in), path_(std::move(path)) {}
  /// The next line into `line`; false at the end of the file. Throws FileError "PATH:LINE: the
  /// line is longer than `max_bytes` bytes (`why`)" once it has read that many without an end.
  bool next(std::string& line, std::size_t max_bytes, const std::string& why);
  /// The number of the line last read (1 for the first).
  int64_t line_number() const { return line_number_; }
  /// "PATH:LINE" of the line last read, for messages.
  std::string where() const { return path_ + ":" + std::to_string(line_number_); }

 private:
  std::istream& in_;
  std::string path_;
  int64_t line_number_ = 0;
};

/// One cell of a line: its text as a view into the line (between the quotes for a quoted cell).
struct CsvCell {
  std::string_view text;
  bool quoted = false;
  /// The cell's value: a quoted cell's doubled quotes made single.
  std::string value() const;
};

/// Splits `line` into `cells` (cleared first), keeping at most `max_cells` of them, and returns how
/// many the line has. Nothing is allocated per cell. Throws FileError naming `where` and the
/// column for a quoted cell not closed on its line or with characters after its closing quote.
std::size_t split_csv_line(std::string_view line, std::vector<CsvCell>& cells, std::size_t max_cells,
                           const std::string& where);

}  // namespace ddp
