#pragma once
// What a program asks of a tokenizer, as an interface with no SentencePiece in it: a process that
// has LibTorch loaded reaches SentencePiece only through a plugin (Note [SentencePiece's protobuf]).
//
// Note [Lines as documents]
// Each line of a text is encoded on its own, preceded by the model's BOS id, as Llama's training
// documents are; the BOS stands for the line break. Encoding whole chunks instead would make the
// ids depend on where a chunk ends (SentencePiece adds a word boundary at the start of each call),
// and most models' normalisation turns a newline into a space, losing it. So a stream of ids is
// decoded line by line, each run between two BOS ids being one line, and
// decode(encode(text)) is the text with each line normalised (NFKC, runs of spaces as one).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ddp {

/// A tokenizer that encodes and decodes one line at a time (Note [Lines as documents]).
class TextTokenizer {
 public:
  virtual ~TextTokenizer() = default;
  virtual int64_t vocab_size() const = 0;
  /// The id that starts each line: BOS, or EOS for a model without one.
  virtual int line_start_id() const = 0;
  /// The line's ids, without the line-start id. Thread-safe.
  virtual std::vector<int> encode_line(std::string_view line) const = 0;
  /// The text of one line's ids.
  virtual std::string decode_line(const std::vector<int>& ids) const = 0;
  /// The model's BOS and EOS ids; -1 for one it lacks. (Last: the plugin's table grows at its end.)
  virtual int bos_id() const = 0;
  virtual int eos_id() const = 0;
};

/// A text's ids: each of its lines as the line-start id, then the line's ids.
std::vector<int64_t> encode_text(const TextTokenizer& tokenizer, std::string_view text);

/// The text of a stream of ids: lines split at each line-start id, joined by newlines. UserError
/// for an id outside the vocabulary.
std::string decode_text(const TextTokenizer& tokenizer, const std::vector<int64_t>& ids);

/// Prints a stream of ids as text while it is drawn: each new id's text as soon as it is whole (a
/// character spread over several byte pieces waits for its last byte).
class StreamDecoder {
 public:
  explicit StreamDecoder(const TextTokenizer& tokenizer) : tokenizer_(tokenizer) {}
  /// The text that `id` adds. UserError for an id outside the vocabulary.
  std::string push(int64_t id);
  /// What the stream holds back at its end (a character whose last bytes never came, as U+FFFD).
  std::string finish();

 private:
  const TextTokenizer& tokenizer_;
  std::vector<int> line_;
  std::string shown_;
  bool started_ = false;
};

}  // namespace ddp
