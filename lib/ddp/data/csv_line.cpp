#include "ddp/data/csv_line.h"

#include "ddp/common/error.h"

namespace ddp {
namespace {

bool is_blank(char c) { return c == ' ' || c == '\t'; }

}  // namespace

bool CsvLineReader::next(std::string& line, std::size_t max_bytes, const std::string& why) {
  line.clear();
  std::streambuf* in = in_.rdbuf();
  int c = in->sbumpc();
  if (c == std::char_traits<char>::eof()) return false;
  ++line_number_;
  for (; c != std::char_traits<char>::eof() && c != '\n'; c = in->sbumpc()) {
    if (line.size() >= max_bytes)
      throw FileError(where() + ": the line is longer than " + std::to_string(max_bytes) + " bytes (" + why + ")");
    line.push_back(static_cast<char>(c));
  }
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return true;
}

std::string CsvCell::value() const {
  if (!quoted) return std::string(text);
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    out.push_back(text[i]);
    if (text[i] == '"') ++i;  // "" is one quote (split_csv_line let no single one through)
  }
  return out;
}

std::size_t split_csv_line(std::string_view line, std::vector<CsvCell>& cells, std::size_t max_cells,
                           const std::string& where) {
  cells.clear();
  std::size_t count = 0, at = 0;
  while (true) {
    ++count;
    while (at < line.size() && is_blank(line[at])) ++at;
    CsvCell cell;
    if (at < line.size() && line[at] == '"') {
      const std::size_t start = ++at;
      while (true) {
        at = line.find('"', at);
        if (at == std::string_view::npos)
          throw FileError(where + ": column " + std::to_string(count) +
                          ": a quoted cell is not closed on its line (a closing \" is missing; newlines inside "
                          "quotes are not read)");
        if (at + 1 < line.size() && line[at + 1] == '"') {
          at += 2;  // an escaped quote
          continue;
        }
        break;
      }
      cell = {line.substr(start, at - start), true};
      ++at;
      while (at < line.size() && is_blank(line[at])) ++at;
      if (at < line.size() && line[at] != ',')
        throw FileError(where + ": column " + std::to_string(count) + ": characters after the closing quote (" +
                        std::string(line.substr(at, std::min<std::size_t>(20, line.size() - at))) +
                        "); a quote inside a quoted cell is written \"\"");
    } else {
      std::size_t end = std::min(line.find(',', at), line.size());
      std::size_t last = end;
      while (last > at && is_blank(line[last - 1])) --last;
      cell = {line.substr(at, last - at), false};
      at = end;
    }
    if (count <= max_cells) cells.push_back(cell);
    if (at >= line.size()) return count;
    ++at;  // the comma
  }
}

}  // namespace ddp
