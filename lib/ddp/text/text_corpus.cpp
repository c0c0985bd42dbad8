#include "ddp/text/text_corpus.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ddp/common/atomic_file.h"
#include "ddp/common/error.h"

namespace ddp {
namespace {

// The length of the valid UTF-8 prefix of `text` (RFC 3629: no overlong forms, no surrogates).
std::size_t valid_utf8_prefix(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto byte = static_cast<unsigned char>(text[i]);
    int extra;
    unsigned char low = 0x80, high = 0xBF;
    if (byte < 0x80) {
      ++i;
      continue;
    } else if (byte >= 0xC2 && byte <= 0xDF) {
      extra = 1;
    } else if (byte >= 0xE0 && byte <= 0xEF) {
      extra = 2;
      if (byte == 0xE0) low = 0xA0;
      if (byte == 0xED) high = 0x9F;
    } else if (byte >= 0xF0 && byte <= 0xF4) {
      extra = 3;
      if (byte == 0xF0) low = 0x90;
      if (byte == 0xF4) high = 0x8F;
    } else {
      return i;
    }
    if (i + extra >= text.size()) return i;  // a character cut off by the end
    for (int k = 1; k <= extra; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      if (next < (k == 1 ? low : 0x80) || next > (k == 1 ? high : 0xBF)) return i;
    }
    i += 1 + extra;
  }
  return i;
}

std::string read_stream(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FileError(path + ": cannot be opened for reading: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw FileError(path + ": read error: " + std::strerror(errno));
  return std::move(text).str();
}

// 0.1 as the user wrote it, not std::to_string's 0.100000.
std::string fraction_text(double fraction) {
  std::ostringstream text;
  text << fraction;
  return text.str();
}

}  // namespace

TextCorpus read_text_corpus(const std::vector<std::string>& files, double held_out_fraction) {
  TextCorpus corpus;
  if (files.empty()) throw UserError("no text files given");
  corpus.contents.reserve(files.size());  // the lines point into these strings: no reallocation
  std::vector<std::size_t> first_lines;   // of each file, to name a line by its file
  for (const auto& file : files) {
    first_lines.push_back(corpus.lines.size());
    if (std::filesystem::is_directory(file)) throw FileError(file + ": a directory, not a text file");
    if (!std::filesystem::exists(file)) throw FileError(file + ": no such file");
    // A pipe, /dev/stdin or <(command) too: read as a stream, as it cannot be sized.
    corpus.contents.push_back(std::filesystem::is_regular_file(file) ? read_whole_file(file) : read_stream(file));
    std::string_view text = corpus.contents.back();
    std::size_t valid = valid_utf8_prefix(text);
    if (valid != text.size()) {
      const auto line = 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(valid), '\n');
      throw FileError(file + ":" + std::to_string(line) + ": not UTF-8 text (byte " + std::to_string(valid) +
                      "); convert it first, e.g. with iconv");
    }
    corpus.bytes += static_cast<int64_t>(text.size());
    for (std::size_t start = 0; start < text.size();) {
      std::size_t end = text.find('\n', start);
      if (end == std::string_view::npos) end = text.size();
      std::string_view line = text.substr(start, end - start);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);  // CRLF files
      corpus.lines.push_back(line);
      start = end + 1;
    }
  }
  const std::string named = files.front() + (files.size() > 1 ? " and the others" : "");
  if (corpus.bytes == 0) throw FileError(named + ": empty");
  const auto blank = [](std::string_view line) { return line.find_first_not_of(" \t\v\f") == std::string_view::npos; };
  if (std::all_of(corpus.lines.begin(), corpus.lines.end(), blank)) throw FileError(named + ": no text, only blank lines");
  corpus.held_out_from = corpus.lines.size();
  if (held_out_fraction <= 0) return corpus;
  int64_t held = 0;
  while (corpus.held_out_from > 0 && static_cast<double>(held) < held_out_fraction * static_cast<double>(corpus.bytes)) {
    --corpus.held_out_from;
    held += static_cast<int64_t>(corpus.lines[corpus.held_out_from].size()) + 1;
  }
  // Whole lines, from the end: one long line (a paragraph a line, a file with no breaks) can take
  // far more than the fraction, and leave little, or nothing, to train on.
  const auto longest =
      std::max_element(corpus.lines.begin() + static_cast<std::ptrdiff_t>(corpus.held_out_from), corpus.lines.end(),
                       [](std::string_view a, std::string_view b) { return a.size() < b.size(); });
  const auto bytes = static_cast<double>(corpus.bytes);
  // More than half the text, and twice what was asked (a small text's lines are each a large share).
  const bool overshot = static_cast<double>(held) > std::max(2 * held_out_fraction, 0.5) * bytes;
  if ((corpus.held_out_from == 0 && 2 * static_cast<double>(longest->size()) > bytes) ||
      (corpus.held_out_from > 0 && overshot)) {
    const auto index = static_cast<std::size_t>(longest - corpus.lines.begin());
    const auto file = std::upper_bound(first_lines.begin(), first_lines.end(), index) - first_lines.begin() - 1;
    throw FileError(files[static_cast<std::size_t>(file)] + ":" +
                    std::to_string(index - first_lines[static_cast<std::size_t>(file)] + 1) + ": this one line holds " +
                    std::to_string(longest->size()) + " of the text's " + std::to_string(corpus.bytes) +
                    " bytes, and the held-out " + fraction_text(held_out_fraction) +
                    " is made of whole lines from the end: it would take " +
                    (corpus.held_out_from == 0 ? std::string("all of the text")
                                               : std::to_string(static_cast<int>(100 * held / bytes + 0.5)) + "%") +
                    "; break the text into lines (at sentences or paragraphs), or hold out nothing with "
                    "--val-fraction 0");
  }
  if (corpus.held_out_from == 0)
    throw FileError(files.back() + ": the text has " + std::to_string(corpus.lines.size()) +
                    " line(s), too few to hold out " + fraction_text(held_out_fraction) +
                    " of it and train on the rest (lower --val-fraction, or give more text)");
  // SentencePiece would say only "!sentences_.empty()", and the train shards would hold no token.
  if (std::all_of(corpus.lines.begin(), corpus.lines.begin() + static_cast<std::ptrdiff_t>(corpus.held_out_from), blank))
    throw FileError(named + ": its first " + std::to_string(corpus.held_out_from) + " line(s), left to train on once " +
                    fraction_text(held_out_fraction) + " of the text is held out, are blank (lower --val-fraction, "
                    "or give more text)");
  return corpus;
}

}  // namespace ddp
