#include "ddp/text/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <unordered_map>

#include "ddp/common/atomic_file.h"
#include "ddp/common/error.h"

namespace ddp {
namespace {

// The training lines as SentencePiece's trainer reads them; it samples max_lines of them itself.
class LineIterator : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(const std::vector<std::string_view>& lines) : lines_(lines) { load(); }
  bool done() const override { return next_ > lines_.size(); }
  void Next() override { load(); }
  const std::string& value() const override { return value_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  void load() {
    if (next_ < lines_.size()) value_.assign(lines_[next_]);
    ++next_;
  }
  const std::vector<std::string_view>& lines_;
  std::size_t next_ = 0;
  std::string value_;
};

constexpr std::size_t kLongestBpeWord = 32768;  // characters: a position must fit 15 bits shifted by 16
constexpr int kMostTrainingThreads = 128;       // SentencePiece's trainer refuses more

// The characters (UTF-8 sequences) of the longest run of `line` without a space.
std::size_t longest_word_characters(std::string_view line) {
  std::size_t longest = 0, run = 0;
  for (unsigned char byte : line) {
    if (byte == ' ') {
      run = 0;
    } else if ((byte & 0xC0) != 0x80) {
      longest = std::max(longest, ++run);
    }
  }
  return longest;
}

}  // namespace

Tokenizer::Tokenizer(std::shared_ptr<sentencepiece::SentencePieceProcessor> processor, const std::string& source)
    : processor_(std::move(processor)) {
  line_start_ = processor_->bos_id() >= 0 ? processor_->bos_id() : processor_->eos_id();
  if (line_start_ < 0)
    throw FileError(source + ": the SentencePiece model has neither a BOS nor an EOS piece, so lines cannot be told "
                             "apart in its token stream");
}

Tokenizer Tokenizer::load(const std::string& path) {
  if (!std::filesystem::is_regular_file(path))
    throw FileError(path + ": no such file (a SentencePiece model, such as a tokenizer.model)");
  return from_serialized(read_whole_file(path), path);
}

Tokenizer Tokenizer::from_serialized(const std::string& serialized, const std::string& source) {
  auto processor = std::make_shared<sentencepiece::SentencePieceProcessor>();
  auto status = processor->LoadFromSerializedProto(serialized);
  if (!status.ok() || processor->GetPieceSize() == 0)
    // SentencePiece's own words name its source file and a protobuf call, nothing of this file.
    throw FileError(source + ": not a SentencePiece model (" +
                    (status.ok()          ? "it has no pieces"
                     : serialized.empty() ? "the file is empty"
                                          : "it does not parse as one: cut short, or a file of another kind") +
                    ")");
  return Tokenizer(std::move(processor), source);
}

std::string Tokenizer::train(const std::vector<std::string_view>& lines, const TokenizerTraining& training) {
  if (lines.empty()) throw UserError("no text to train a tokenizer on");
  // SentencePiece leaves out of training, unsaid (at our log level), every line longer than its
  // max_sentence_length, 4192 bytes by default: text kept a paragraph or an article a line would
  // train on a part, or on nothing. The limit is the longest line's, up to a bound on its memory.
  constexpr std::size_t kLongestLine = std::size_t{64} << 20;
  std::size_t longest = 0, too_long = 0;
  for (std::string_view line : lines) {
    longest = std::max(longest, std::min(line.size(), kLongestLine));
    too_long += line.size() > kLongestLine;
  }
  if (too_long > 0)
    spdlog::warn("{} line{} of more than 64 MiB {} left out of the tokenizer's training", too_long,
                 too_long == 1 ? "" : "s", too_long == 1 ? "is" : "are");
  // SentencePiece's BPE trainer packs a word's character positions in 16 bits (EncodePos), and a
  // word of 32768 characters or more (base64, minified JSON, unspaced CJK) crashed it. Such lines
  // are left out of its training, and said; they are encoded as any other.
  std::vector<std::string_view> kept;
  const bool bpe = training.model_type == "bpe";
  if (bpe)
    for (std::string_view line : lines)
      if (longest_word_characters(line) < kLongestBpeWord) kept.push_back(line);
  if (bpe && kept.size() < lines.size()) {
    if (kept.empty())
      throw UserError("every line holds a word of " + std::to_string(kLongestBpeWord) +
                      " characters or more, which --model-type bpe cannot train on: break the text at spaces, or use "
                      "--model-type unigram");
    spdlog::warn(
        "{} line(s) holding a word of {} characters or more (no space in it) are left out of the BPE "
        "tokenizer's training, which cannot take one; they are encoded as any other",
        lines.size() - kept.size(), kLongestBpeWord);
  }
  // Llama's choices where they matter for text in, text out: unknown characters as their UTF-8
  // bytes rather than <unk> (so every text round-trips), digits one by one.
  const std::unordered_map<std::string, std::string> options = {
      {"model_type", training.model_type},
      {"vocab_size", std::to_string(training.vocab_size)},
      {"character_coverage", std::to_string(training.character_coverage)},
      {"input_sentence_size", std::to_string(training.max_lines)},
      {"max_sentence_length", std::to_string(std::max<std::size_t>(longest, 4192))},
      {"shuffle_input_sentence", "true"},
      {"num_threads", std::to_string(std::min(training.threads, kMostTrainingThreads))},
      {"byte_fallback", "true"},
      {"split_digits", "true"},
      {"minloglevel", "2"}};  // its progress lines would drown ours
  LineIterator iterator(bpe ? kept : lines);
  std::string serialized;
  auto status = sentencepiece::SentencePieceTrainer::Train(options, &iterator, &serialized);
  if (!status.ok()) {
    std::string reason = status.error_message();
    auto bracket = reason.find("] ");  // "./src/trainer_interface.cc(660) [check] reason": the reason
    if (bracket != std::string::npos) {
      // A failed check has no words after it ("[!sentences_.empty()] "): the check is the reason then.
      const std::size_t open = reason.rfind('[', bracket);
      reason = bracket + 2 < reason.size() || open == std::string::npos
                   ? reason.substr(bracket + 2)
                   : "its check " + reason.substr(open + 1, bracket - open - 1) + " failed";
    }
    const std::string their_option = "--character_coverage option";  // its command line's name, not ours
    if (auto at = reason.find(their_option); at != std::string::npos) reason.replace(at, their_option.size(), "--character-coverage");
    throw UserError("training the tokenizer failed: " + reason);
  }
  return serialized;
}

int64_t Tokenizer::vocab_size() const { return processor_->GetPieceSize(); }

int Tokenizer::bos_id() const { return processor_->bos_id(); }

int Tokenizer::eos_id() const { return processor_->eos_id(); }

bool Tokenizer::same_pieces(const Tokenizer& other) const {
  if (vocab_size() != other.vocab_size()) return false;
  for (int id = 0; id < processor_->GetPieceSize(); ++id)
    if (processor_->IdToPiece(id) != other.processor_->IdToPiece(id) ||
        processor_->GetScore(id) != other.processor_->GetScore(id))
      return false;
  return true;
}

std::vector<int> Tokenizer::encode_line(std::string_view line) const {
  std::vector<int> ids;
  auto status = processor_->Encode(line, &ids);
  if (!status.ok()) throw UserError("SentencePiece could not encode a line: " + status.ToString());
  return ids;
}

std::string Tokenizer::decode_line(const std::vector<int>& ids) const {
  std::string text;
  auto status = processor_->Decode(ids, &text);
  if (!status.ok()) throw UserError("SentencePiece could not decode: " + status.ToString());
  return text;
}

}  // namespace ddp
