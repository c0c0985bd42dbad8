// The SentencePiece tokenizer, the text corpus and the parallel encoder, in-process; ids held
// against Python's sentencepiece on the same model.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <sstream>

#include "ddp/common/error.h"
#include "ddp/text/parallel_encoder.h"
#include "ddp/text/sentencepiece_tokenizer.h"
#include "ddp/text/text_corpus.h"
#include "kjv_text.h"
#include "support/subprocess.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp::test;
using Catch::Matchers::Contains;
using Catch::Matchers::Equals;

namespace {

// Lines SentencePiece's normalisation changes (NFKC's full-width letters and ligatures, runs of
// spaces, tabs), characters no training line had (so byte pieces), and CRLF line ends.
const std::string kAwkward =
    "Ｆｕｌｌ  width\tand ﬁne ligatures  \r\n"
    "runes ᚠᚢᚦ and 🙂, digits 12345\n"
    "\n"
    "  leading spaces\n"
    "And God said, Let there be light: and there was light.";

std::vector<int64_t> flat(const std::vector<std::vector<uint32_t>>& chunks) {
  std::vector<int64_t> ids;
  for (const auto& chunk : chunks) ids.insert(ids.end(), chunk.begin(), chunk.end());
  return ids;
}

}  // namespace

TEST_CASE("a text corpus: lines without their ends, the last whole lines held out, and its refusals", "[text]") {
  TempDir dir;
  write_file(dir.file("a.txt"), "one\r\ntwo\n");
  write_file(dir.file("b.txt"), "three\nfour four four four\n");
  auto corpus = ddp::read_text_corpus({dir.file("a.txt"), dir.file("b.txt")}, 0.4);
  CHECK(corpus.lines == std::vector<std::string_view>{"one", "two", "three", "four four four four"});
  CHECK(corpus.bytes == 35);
  CHECK(corpus.held_out_from == 3);  // "four four four four\n" is 20 of 35 bytes
  CHECK(ddp::read_text_corpus({dir.file("a.txt")}, 0).held_out_from == 2);
  write_file(dir.file("gap.txt"), "x\n\ny");  // an empty line is a line; the last needs no line end
  CHECK(ddp::read_text_corpus({dir.file("gap.txt")}, 0).lines == std::vector<std::string_view>{"x", "", "y"});

  write_file(dir.file("latin1.txt"), "fine\nna\xEFve\n");
  CHECK_THROWS_WITH(ddp::read_text_corpus({dir.file("latin1.txt")}, 0.1),
                    Contains(dir.file("latin1.txt") + ":2: not UTF-8 text (byte 7)"));
  write_file(dir.file("cut.txt"), "cut off \xE2\x82");
  CHECK_THROWS_WITH(ddp::read_text_corpus({dir.file("cut.txt")}, 0.1), Contains(":1: not UTF-8 text (byte 8)"));
  write_file(dir.file("empty.txt"), "");
  CHECK_THROWS_WITH(ddp::read_text_corpus({dir.file("empty.txt")}, 0.1), Contains(dir.file("empty.txt") + ": empty"));
  write_file(dir.file("one.txt"), "a single line");
  CHECK_THROWS_WITH(ddp::read_text_corpus({dir.file("one.txt")}, 0.1),
                    Contains(dir.file("one.txt") + ":1: this one line holds 13 of the text's 13 bytes") &&
                        Contains("it would take all of the text; break the text into lines"));
  write_file(dir.file("short.txt"), "a\nb\n");
  CHECK_THROWS_WITH(ddp::read_text_corpus({dir.file("short.txt")}, 0.9), Contains("the text has 2 line(s), too few"));
  // A text whose last line holds most of it, in the second of two files: named by file and line,
  // not held out silently (it was: trained on 2% of the text, validated on the rest).
  write_file(dir.file("lines.txt"), "first line\nsecond line\n");
  write_file(dir.file("long_end.txt"), "a\n" + std::string(1000, 'w') + "\n");
  CHECK_THROWS_WITH(ddp::read_text_corpus({dir.file("lines.txt"), dir.file("long_end.txt")}, 0.1),
                    Contains(dir.file("long_end.txt") + ":2: this one line holds 1000 of the text's 1026 bytes") &&
                        Contains("the held-out 0.1 is made of whole lines from the end: it would take 98%"));
  CHECK_THROWS_WITH(ddp::read_text_corpus({dir.file("none.txt")}, 0.1), Contains(dir.file("none.txt") + ": no such file"));
  // Text only in the held-out end: SentencePiece said only "its check !sentences_.empty() failed".
  write_file(dir.file("late.txt"), "\n \n\t\nthe only words are at the end of the text\n");
  CHECK_THROWS_WITH(ddp::read_text_corpus({dir.file("late.txt")}, 0.5),
                    dir.file("late.txt") + ": its first 3 line(s), left to train on once 0.5 of the text is held "
                                           "out, are blank (lower --val-fraction, or give more text)");
  CHECK(ddp::read_text_corpus({dir.file("late.txt")}, 0).held_out_from == 4);
}

TEST_CASE("a SentencePiece tokenizer trained on the Bible: Python's ids line for line, decode(encode(text)) the "
          "normalised text, and the same ids on any number of threads", "[text][python]") {
  TempDir dir;
  if (!write_kjv_text(dir.file("kjv.txt")) || !have_python_sentencepiece()) return;
  auto corpus = ddp::read_text_corpus({dir.file("kjv.txt")}, 0.1);
  for (const std::string type : {"bpe", "unigram"}) {
    INFO(type);
    ddp::TokenizerTraining training;
    training.model_type = type;
    training.vocab_size = 1000;
    training.threads = 2;
    const std::string model = dir.file(type + ".model");
    write_file(model, ddp::Tokenizer::train(corpus.training_lines(), training));
    ddp::Tokenizer tokenizer = ddp::Tokenizer::load(model);
    CHECK(tokenizer.vocab_size() == 1000);
    CHECK(tokenizer.line_start_id() == 1);  // <s>

    write_file(dir.file("sample.txt"), std::string(corpus.contents[0].substr(0, 20000)) + "\n" + kAwkward);
    ddp::TextCorpus sample = ddp::read_text_corpus({dir.file("sample.txt")}, 0);
    auto python = run_shell("/usr/bin/python3 " DDP_SOURCE_DIR "/tests/support/sentencepiece_lines.py " + model + " " +
                            dir.file("sample.txt"), std::chrono::seconds(120));
    REQUIRE(python.exit_code == 0);
    std::istringstream lines(python.out);
    std::string json_line, normalised;
    std::vector<int64_t> expected_stream;
    for (std::size_t i = 0; std::getline(lines, json_line); ++i) {
      REQUIRE(i < sample.lines.size());
      auto theirs = nlohmann::json::parse(json_line);
      INFO("line " << i + 1 << ": " << sample.lines[i]);
      CHECK(tokenizer.encode_line(sample.lines[i]) == theirs["ids"].get<std::vector<int>>());
      normalised += (i ? "\n" : "") + theirs["text"].get<std::string>();
      expected_stream.push_back(tokenizer.line_start_id());
      for (int id : theirs["ids"]) expected_stream.push_back(id);
    }
    // The awkward lines normalise (NFKC, runs of spaces) but lose no character: byte pieces carry
    // what the training text never had.
    CHECK_THAT(normalised, Contains("Full width and fine ligatures\nrunes ᚠᚢᚦ and 🙂, digits 12345\n\nleading spaces"));
    auto stream = ddp::encode_text(tokenizer, read_file(dir.file("sample.txt")));
    CHECK(stream == expected_stream);
    CHECK(ddp::decode_text(tokenizer, stream) == normalised);
    // The Bible's own lines are already normal: they come back byte for byte.
    CHECK(ddp::decode_text(tokenizer, ddp::encode_text(tokenizer, corpus.contents[0].substr(0, 50000))) ==
          corpus.contents[0].substr(0, 50000));

    // Printing as ids come, character by character once whole, gives the same text.
    ddp::StreamDecoder streaming(tokenizer);
    std::string shown;
    for (int64_t id : stream) shown += streaming.push(id);
    CHECK(shown + streaming.finish() == normalised);
    CHECK_THROWS_WITH(streaming.push(1000), Contains("token 1000 is outside the tokenizer's vocabulary (ids 0 to 999)"));

    auto one = flat(ddp::encode_lines(tokenizer, sample.lines, 1));
    CHECK(one == stream);
    // 1.5 MB: six chunks of lines, so three threads each take some and finish out of order.
    std::vector<std::string_view> many;
    for (int copy = 0; copy < 4; ++copy) many.insert(many.end(), corpus.lines.begin(), corpus.lines.end());
    auto three = ddp::encode_lines(tokenizer, many, 3);
    CHECK(three.size() >= 6);
    CHECK(flat(three) == flat(ddp::encode_lines(tokenizer, many, 1)));
  }
}

TEST_CASE("the tokenizer refuses what is not a SentencePiece model, and a vocabulary the text cannot fill",
          "[text]") {
  TempDir dir;
  CHECK_THROWS_WITH(ddp::Tokenizer::load(dir.file("none.model")), Contains(dir.file("none.model") + ": no such file"));
  write_file(dir.file("garbage.model"), std::string(500, '\x07'));
  CHECK_THROWS_AS(ddp::Tokenizer::load(dir.file("garbage.model")), ddp::FileError);
  // In words of the file, not SentencePiece's source line and protobuf call.
  CHECK_THROWS_WITH(ddp::Tokenizer::load(dir.file("garbage.model")),
                    Equals(dir.file("garbage.model") + ": not a SentencePiece model (it does not parse as one: cut "
                                                       "short, or a file of another kind)"));
  write_file(dir.file("empty.model"), "");
  CHECK_THROWS_WITH(ddp::Tokenizer::load(dir.file("empty.model")), Contains("(the file is empty)"));
  write_file(dir.file("small.txt"), "a few words\nand a few more\nthen some\n");
  auto corpus = ddp::read_text_corpus({dir.file("small.txt")}, 0);
  ddp::TokenizerTraining training;
  training.vocab_size = 5000;
  CHECK_THROWS_WITH(ddp::Tokenizer::train(corpus.training_lines(), training),
                    Contains("training the tokenizer failed: Vocabulary size too high (5000). Please set it to a value <="));
}

TEST_CASE(
    "BPE training leaves out lines with a word too long for SentencePiece's trainer (was: a segfault), and "
    "more threads than its trainer takes are capped",
    "[text]") {
  std::vector<std::string> text;
  for (int i = 0; i < 300; ++i) text.push_back("the quick brown fox jumps over the lazy dog " + std::to_string(i));
  text[100] = std::string(40000, 'x');  // one word of 40000 characters
  text[200].clear();
  for (int i = 0; i < 33000; ++i) text[200] += "\xe6\xbc\xa2";  // 33000 characters (漢) in 99000 bytes
  std::vector<std::string_view> lines(text.begin(), text.end());
  ddp::TokenizerTraining training;
  training.vocab_size = 340;  // byte fallback's 256 pieces, the text's characters, some merges
  training.model_type = "bpe";
  training.threads = 300;
  const std::string model = ddp::Tokenizer::train(lines, training);
  CHECK(!model.empty());
  std::vector<std::string_view> only_long{text[100]};
  CHECK_THROWS_WITH(ddp::Tokenizer::train(only_long, training),
                    Contains("every line holds a word of 32768 characters or more, which --model-type bpe cannot train "
                             "on"));
}

}  // namespace DDP_TEST_FILE
