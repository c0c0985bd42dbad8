// Token files for language models (issue 23, item 1): llm.c shards written here byte by byte from
// the format's description, nanoGPT's headerless files, numpy's 1-D arrays; windows across a glob
// of shards; and one message for each bad file.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>

#include "ddp/common/error.h"
#include "ddp/data/token_shards.h"
#include "support/subprocess.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp;
using namespace ddp::test;
using Catch::Contains;

namespace {

// llm.c's layout: 256 little-endian int32 (magic, version, token count, zeros), then the tokens.
std::string llmc_shard(int32_t magic, int32_t version, int32_t count, const std::vector<uint32_t>& tokens, int bytes) {
  std::string out(1024, '\0');
  std::memcpy(out.data(), &magic, 4);
  std::memcpy(out.data() + 4, &version, 4);
  std::memcpy(out.data() + 8, &count, 4);
  for (uint32_t token : tokens) out.append(reinterpret_cast<const char*>(&token), static_cast<std::size_t>(bytes));
  return out;
}

std::vector<uint32_t> iota(uint32_t first, int n) {
  std::vector<uint32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(first + static_cast<uint32_t>(i));
  return out;
}

std::vector<int64_t> row(const torch::Tensor& t, int64_t i) {
  auto r = t[i].contiguous();
  return {r.data_ptr<int64_t>(), r.data_ptr<int64_t>() + r.numel()};
}

}  // namespace

TEST_CASE("llm.c shards of both widths, a raw file and an npy read as windows of block_size + 1", "[data][tokens]") {
  TempDir dir;
  write_file(dir.file("shard_000.bin"), llmc_shard(20240520, 1, 10, iota(0, 10), 2));
  write_file(dir.file("shard_001.bin"), llmc_shard(20240801, 7, 9, iota(70000, 9), 4));
  TokenWindows windows(dir.file("shard_*.bin"), "data.path", "", 4);
  REQUIRE(windows.shards().size() == 2);
  CHECK(windows.shards()[0]->format() == "llm.c uint16");
  CHECK(windows.shards()[1]->format() == "llm.c uint32");
  // 10 tokens: windows at 0 and 4 (each 5 tokens); 9 tokens: windows at 0 and 4. None crosses a shard.
  REQUIRE(windows.size() == 4);
  auto got = windows.read(torch::tensor({3, 0, 1, 2}, torch::kLong));
  CHECK(row(got, 0) == std::vector<int64_t>{70004, 70005, 70006, 70007, 70008});
  CHECK(row(got, 1) == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(row(got, 2) == std::vector<int64_t>{4, 5, 6, 7, 8});
  CHECK(row(got, 3) == std::vector<int64_t>{70000, 70001, 70002, 70003, 70004});

  std::string raw;
  for (uint16_t t : {5, 6, 7, 8, 9, 10}) raw.append(reinterpret_cast<const char*>(&t), 2);
  write_file(dir.file("train.bin"), raw);
  TokenWindows nanogpt(dir.file("train.bin"), "data.path", "uint16", 2);
  CHECK(nanogpt.shards()[0]->format() == "raw uint16");
  CHECK(nanogpt.size() == 2);
  CHECK(row(nanogpt.read(torch::tensor({1}, torch::kLong)), 0) == std::vector<int64_t>{7, 8, 9});

  auto python = run_command({"/usr/bin/python3", "-c",
                             "import sys, numpy as np; np.save(sys.argv[1], np.arange(60000, 60020, dtype=np.uint16))",
                             dir.file("tokens.npy")});
  REQUIRE(python.exit_code == 0);
  TokenWindows npy(dir.file("tokens.npy"), "data.path", "", 8);
  CHECK(npy.shards()[0]->format() == "npy uint16");
  CHECK(npy.size() == 2);
  CHECK(row(npy.read(torch::tensor({1}, torch::kLong)), 0)[8] == 60016);
}

TEST_CASE("bad token files get one line each, naming the file", "[data][tokens]") {
  TempDir dir;
  auto refused = [&](const std::string& name, const std::string& bytes, const std::string& dtype = "",
                     int64_t block = 4) -> std::string {
    write_file(dir.file(name), bytes);
    try {
      TokenWindows windows(dir.file(name), "data.path", dtype, block);
    } catch (const FileError& e) {
      return e.what();
    }
    return "(accepted)";
  };
  CHECK(refused("version.bin", llmc_shard(20240520, 2, 10, iota(0, 10), 2)) ==
        dir.file("version.bin") + ": llm.c shard with magic 20240520 has version 2, expected 1");
  CHECK(refused("count.bin", llmc_shard(20240520, 1, 12, iota(0, 10), 2)) ==
        dir.file("count.bin") + ": its llm.c header says 12 tokens, the file holds 20 bytes of 2-byte tokens after "
                                "the header");
  CHECK(refused("header.bin", llmc_shard(20240801, 7, 0, {}, 4).substr(0, 100)) ==
        dir.file("header.bin") + ": is cut short inside its llm.c header (100 bytes)");
  CHECK(refused("empty.bin", "") == dir.file("empty.bin") + ": is empty: a token file needs at least two tokens");
  CHECK(refused("short.bin", llmc_shard(20240520, 1, 4, iota(0, 4), 2)) ==
        dir.file("short.bin") + ": holds 4 tokens, fewer than one window of model.block_size + 1 = 5");
  // A short shard among others, as ddp-tokenize's last may be: skipped, and kept to be said (was:
  // the whole dataset refused). Shards all short: refused, naming the first.
  write_file(dir.file("split_0.bin"), llmc_shard(20240520, 1, 9, iota(0, 9), 2));
  write_file(dir.file("split_1.bin"), llmc_shard(20240520, 1, 3, iota(0, 3), 2));
  TokenWindows split(dir.file("split_*.bin"), "data.path", "", 4);
  CHECK(split.size() == 2);
  REQUIRE(split.skipped().size() == 1);
  CHECK(split.skipped()[0].path == dir.file("split_1.bin"));
  CHECK(split.skipped()[0].tokens == 3);
  CHECK_THROWS_WITH(TokenWindows(dir.file("split_*.bin"), "data.path", "", 9),
                    dir.file("split_0.bin") + ": holds 9 tokens, fewer than one window of model.block_size + 1 = 10 "
                    "(so do all 2 files that " + dir.file("split_*.bin") + " matches)");
  CHECK_THAT(refused("magic.bin", std::string(64, 'x')),
             Contains(dir.file("magic.bin") + ": is not an llm.c token shard (magic 2021161080, expected 20240520 or "
                                              "20240801) nor an .npy; a headerless file (nanoGPT's train.bin) needs "
                                              "data.token_dtype: uint16 or uint32"));
  CHECK(refused("odd.bin", std::string(7, 'x'), "uint16") == dir.file("odd.bin") + ": 7 bytes is not a whole number of uint16 tokens");
  CHECK_THROWS_WITH(TokenWindows(dir.file("nothing_*.bin"), "data.eval_path", "", 4),
                    "data.eval_path: " + dir.file("nothing_*.bin") + " matches no file");
  // A file whose name holds a glob's bracket is itself (was: "matches no file", or, with exp1/
  // beside it, exp1's tokens under exp[1]'s name).
  std::filesystem::create_directories(dir.file("exp[1]"));
  std::filesystem::create_directories(dir.file("exp1"));
  write_file(dir.file("exp[1]/train.bin"), llmc_shard(20240520, 1, 9, iota(0, 9), 2));
  write_file(dir.file("exp1/train.bin"), llmc_shard(20240520, 1, 17, iota(0, 17), 2));
  TokenWindows bracket(dir.file("exp[1]/train.bin"), "data.path", "", 4);
  REQUIRE(bracket.shards().size() == 1);
  CHECK(bracket.shards()[0]->path() == dir.file("exp[1]/train.bin"));
  CHECK(bracket.shards()[0]->tokens() == 9);
  REQUIRE(mkfifo(dir.file("pipe.bin").c_str(), 0600) == 0);  // its open used to wait for a writer
  CHECK_THROWS_WITH(TokenWindows(dir.file("pipe.bin"), "data.path", "", 4), Contains("pipe.bin") && Contains("is not a regular file"));

  auto python = run_command({"/usr/bin/python3", "-c",
                             "import sys, numpy as np; np.save(sys.argv[1], np.zeros((4, 5), dtype=np.int32)); "
                             "np.save(sys.argv[2], np.zeros(9, dtype=np.float32))",
                             dir.file("matrix.npy"), dir.file("floats.npy")});
  REQUIRE(python.exit_code == 0);
  CHECK_THROWS_WITH(TokenWindows(dir.file("matrix.npy"), "data.path", "", 4),
                    Contains("a token .npy must be a 1-D array of integers") && Contains("this one has 2 dimensions"));
  CHECK_THROWS_WITH(TokenWindows(dir.file("floats.npy"), "data.path", "", 4), Contains("this one holds f4"));
}

TEST_CASE("a token id outside the vocabulary is found before training, with its file and byte offset", "[data][tokens]") {
  TempDir dir;
  std::vector<uint32_t> tokens;
  for (uint32_t i = 0; i < 300; ++i) tokens.push_back(i % 200);
  tokens[257] = 256;  // one beyond a byte-level vocabulary
  write_file(dir.file("a.bin"), llmc_shard(20240520, 1, 300, tokens, 2));
  TokenWindows windows(dir.file("a.bin"), "data.path", "", 16);
  CHECK_NOTHROW(windows.check_vocabulary(300, "model.vocab_size"));
  CHECK_THROWS_WITH(windows.check_vocabulary(256, "model.vocab_size"),
                    dir.file("a.bin") + ": token 257 (byte offset 1538) is 256, outside model.vocab_size 256 (ids 0 to 255)");
}

TEST_CASE("make_tokens.py writes byte-level llm.c shards that read back as the text, holding out its end",
          "[data][tokens][python]") {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 200; ++i) text += "line " + std::to_string(i) + ": the quick brown fox\n";
  write_file(dir.file("story.txt"), text);
  auto made = run_command({"/usr/bin/python3", std::string(DDP_SOURCE_DIR) + "/scripts/make_tokens.py", dir.file("out"),
                           "--text", dir.file("story.txt"), "--shard-tokens", "2000"},
                          std::chrono::seconds(60));
  INFO(made.out << made.err);
  REQUIRE(made.exit_code == 0);
  TokenWindows train(dir.file("out/story_train_*.bin"), "data.path", "", 1);
  TokenWindows val(dir.file("out/story_val_*.bin"), "data.eval_path", "", 1);
  CHECK(train.shards().size() > 1);  // 2,000-token shards
  std::string back;
  for (const auto* split : {&train, &val})
    for (const auto& shard : split->shards()) {
      std::vector<int64_t> tokens(static_cast<std::size_t>(shard->tokens()));
      shard->read(0, shard->tokens(), tokens.data());
      for (int64_t t : tokens) back += static_cast<char>(t);
    }
  CHECK(back == text);
  int64_t held = 0;
  for (const auto& shard : val.shards()) held += shard->tokens();
  CHECK(held >= static_cast<int64_t>(text.size() / 10));
  CHECK(held < static_cast<int64_t>(text.size() / 10) + 40);  // whole lines, about a tenth
  CHECK(text.substr(text.size() - static_cast<std::size_t>(held)).find("line 180") == 0);
  // What it cannot make shards of: one line, naming the cause, exit 1, no shard written.
  write_file(dir.file("empty.txt"), "\n \n");
  write_file(dir.file("one.txt"), "a single line\n");
  for (const auto& [args, expected] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--text", dir.file("empty.txt")}, dir.file("empty.txt") + ": no text"},
           {{"--text", dir.file("one.txt")}, dir.file("one.txt") + ": one line, which cannot be split"},
           {{"--text", dir.file("story.txt"), "--shard-tokens", "0"}, "--shard-tokens must be at least 1"}}) {
    std::vector<std::string> argv{"/usr/bin/python3", std::string(DDP_SOURCE_DIR) + "/scripts/make_tokens.py",
                                  dir.file("refused")};
    argv.insert(argv.end(), args.begin(), args.end());
    auto refused = run_command(argv, std::chrono::seconds(60));
    INFO(refused.out << refused.err);
    CHECK(refused.exit_code != 0);
    CHECK_THAT(refused.err, Contains(expected) && !Contains("Traceback"));
    CHECK_FALSE(std::filesystem::exists(dir.file("refused")));
  }

  if (run_shell("command -v bible").exit_code != 0) {
    WARN("skipped: the King James Bible part: no `bible` (Debian's bible-kjv; scripts/setup.sh installs it)");
    return;
  }
  auto kjv = run_command({"/usr/bin/python3", std::string(DDP_SOURCE_DIR) + "/scripts/make_tokens.py", dir.file("kjv"), "--kjv"},
                         std::chrono::seconds(120));
  INFO(kjv.out << kjv.err);
  REQUIRE(kjv.exit_code == 0);
  CHECK_THAT(kjv.out, Contains("held out: 23 books, Acts to Rev"));
  TokenWindows bible(dir.file("kjv/kjv_val_*.bin"), "data.eval_path", "", 128);
  std::vector<int64_t> start(40);
  bible.shards()[0]->read(0, 40, start.data());
  CHECK(std::string(start.begin(), start.end()) == "The former treatise have I made, O Theop");  // Acts 1:1
  CHECK_NOTHROW(bible.check_vocabulary(256, "model.vocab_size"));
}

TEST_CASE("a shard of more than 2^31 tokens (5 GB, sparse) is mapped, not read, and its last window is right",
          "[data][tokens]") {
  TempDir dir;
  std::string path = dir.file("big.bin");
  constexpr int64_t kTokens = (int64_t{5} << 30) / 2;  // uint16: 2.7e9 tokens, past int32 offsets
  {
    FILE* file = std::fopen(path.c_str(), "wb");
    REQUIRE(file);
    REQUIRE(::ftruncate(fileno(file), kTokens * 2) == 0);  // a hole: no disk, reads as zeros
    uint16_t tail[3] = {7, 8, 9};
    REQUIRE(::fseeko(file, (kTokens - 3) * 2, SEEK_SET) == 0);
    REQUIRE(std::fwrite(tail, 2, 3, file) == 3);
    std::fclose(file);
  }
  TokenWindows windows(path, "data.path", "uint16", 2);
  CHECK(windows.size() == (kTokens - 1) / 2);
  // The last window ends at token 2·size: here the file's next-to-last token.
  auto last = windows.read(torch::tensor({windows.size() - 1}, torch::kLong));
  CHECK(row(last, 0) == std::vector<int64_t>{0, 7, 8});
}

}  // namespace DDP_TEST_FILE
