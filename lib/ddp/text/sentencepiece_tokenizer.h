#pragma once
// A SentencePiece model over Debian's libsentencepiece: trained here on a text, or taken as a
// tokenizer.model someone published (Llama 2's, Mistral's, Gemma's...).

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ddp/text/text_tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace ddp {

/// How ddp-tokenize trains a SentencePiece model (SentencePiece's own option names in comments).
struct TokenizerTraining {
  std::string model_type = "bpe";      ///< bpe | unigram (model_type)
  int64_t vocab_size = 8000;           ///< pieces, with <unk>, <s>, </s> and the 256 byte pieces (vocab_size)
  double character_coverage = 0.9995;  ///< characters rarer than this share fall back to bytes
  int64_t max_lines = 2'000'000;       ///< lines sampled from a larger text (input_sentence_size)
  int threads = 1;                     ///< (num_threads)
};

/// A loaded SentencePiece model. Encoding is thread-safe: every method is const.
class Tokenizer : public TextTokenizer {
 public:
  /// Reads a tokenizer.model; FileError naming the file when it is missing or not a SentencePiece model.
  static Tokenizer load(const std::string& path);
  /// Trains a model on `lines` and returns its serialised form (what a tokenizer.model holds).
  /// UserError with SentencePiece's reason when it cannot (a vocabulary larger than the text allows).
  static std::string train(const std::vector<std::string_view>& lines, const TokenizerTraining& training);
  /// The model in `serialized` (train's result); `source` names it in errors.
  static Tokenizer from_serialized(const std::string& serialized, const std::string& source);

  int64_t vocab_size() const override;
  int line_start_id() const override { return line_start_; }
  int bos_id() const override;
  int eos_id() const override;
  std::vector<int> encode_line(std::string_view line) const override;
  std::string decode_line(const std::vector<int>& ids) const override;
  /// The same pieces with the same scores, id for id: they encode alike, whatever else the two
  /// files record of their training (its thread count).
  bool same_pieces(const Tokenizer& other) const;

 private:
  Tokenizer(std::shared_ptr<sentencepiece::SentencePieceProcessor> processor, const std::string& source);
  std::shared_ptr<sentencepiece::SentencePieceProcessor> processor_;
  int line_start_ = -1;
};

}  // namespace ddp
