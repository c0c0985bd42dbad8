#include "ddp/text/text_tokenizer.h"

#include "ddp/common/error.h"

namespace ddp {

std::vector<int64_t> encode_text(const TextTokenizer& tokenizer, std::string_view text) {
  std::vector<int64_t> ids;
  for (std::size_t start = 0;;) {
    const std::size_t end = text.find('\n', start);
    ids.push_back(tokenizer.line_start_id());
    for (int id : tokenizer.encode_line(text.substr(start, end == std::string_view::npos ? end : end - start)))
      ids.push_back(id);
    if (end == std::string_view::npos) return ids;
    start = end + 1;
  }
}

std::string decode_text(const TextTokenizer& tokenizer, const std::vector<int64_t>& ids) {
  std::string text;
  std::vector<int> line;
  bool first = true;
  auto flush = [&]() {
    text += tokenizer.decode_line(line);
    line.clear();
  };
  for (int64_t id : ids) {
    if (id < 0 || id >= tokenizer.vocab_size())
      throw UserError("token " + std::to_string(id) + " is outside the tokenizer's vocabulary (ids 0 to " +
                      std::to_string(tokenizer.vocab_size() - 1) + ")");
    if (id == tokenizer.line_start_id()) {
      if (!first) {
        flush();
        text += '\n';
      }
      first = false;
      continue;
    }
    first = false;
    line.push_back(static_cast<int>(id));
  }
  flush();
  return text;
}

std::string StreamDecoder::push(int64_t id) {
  if (id < 0 || id >= tokenizer_.vocab_size())
    throw UserError("token " + std::to_string(id) + " is outside the tokenizer's vocabulary (ids 0 to " +
                    std::to_string(tokenizer_.vocab_size() - 1) + ")");
  if (id == tokenizer_.line_start_id()) {
    std::string rest = finish();  // the line's held-back end, if it never became whole
    line_.clear();
    shown_.clear();
    const bool started = started_;
    started_ = true;
    return started ? rest + "\n" : rest;
  }
  started_ = true;
  line_.push_back(static_cast<int>(id));
  std::string text = tokenizer_.decode_line(line_);
  // A character whose bytes have not all come decodes as U+FFFD for now; and a word boundary at
  // the line's start only shows once a piece follows it. Show what is settled.
  static const std::string kReplacement = "\xEF\xBF\xBD";
  if (text.size() >= kReplacement.size() && text.compare(text.size() - kReplacement.size(), kReplacement.size(),
                                                         kReplacement) == 0)
    return "";
  if (text.compare(0, shown_.size(), shown_) != 0) return "";
  std::string added = text.substr(shown_.size());
  shown_ = std::move(text);
  return added;
}

std::string StreamDecoder::finish() {
  std::string text = line_.empty() ? "" : tokenizer_.decode_line(line_);
  if (text.compare(0, shown_.size(), shown_) != 0) return "";
  std::string rest = text.substr(shown_.size());
  shown_ = std::move(text);
  return rest;
}

}  // namespace ddp
