#pragma once
// The text ddp-tokenize reads: UTF-8 files, taken as one sequence of lines, the last whole lines
// (about a fraction of the bytes) held out for evaluation.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ddp {

/// Files' lines, in order, with the split between training and held-out text.
struct TextCorpus {
  std::vector<std::string> contents;      ///< each file's bytes (the lines point into them)
  std::vector<std::string_view> lines;    ///< without their line breaks
  std::size_t held_out_from = 0;          ///< lines[held_out_from:] are the held-out split
  int64_t bytes = 0;                      ///< the files' sizes together

  std::vector<std::string_view> training_lines() const {
    return {lines.begin(), lines.begin() + static_cast<std::ptrdiff_t>(held_out_from)};
  }
};

/// Reads `files` and holds out the last whole lines making up at least `held_out_fraction` of the
/// bytes (at least one line; 0 holds out nothing). FileError naming the file (and line) for one
/// that cannot be read, is not UTF-8, or when the text has too few lines for the split.
TextCorpus read_text_corpus(const std::vector<std::string>& files, double held_out_fraction);

}  // namespace ddp
