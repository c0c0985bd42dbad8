// ddp-tokenize as users run it: text in, tokenizer.model and llm.c shards out, every token the
// tokenizer's encoding of the text; stale shards gone on a re-run; a full disk leaves an earlier
// run's output as it was; each bad input one line, exit 2, nothing written.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include <unistd.h>

#include "ddp/common/error.h"
#include "ddp/text/sentencepiece_tokenizer.h"
#include "ddp/text/token_shard_writer.h"
#include "kjv_text.h"
#include "support/subprocess.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp::test;
using Catch::Matchers::Contains;

namespace {

// An llm.c shard's tokens, read from its format description; REQUIREs a sound header.
std::vector<int64_t> shard_tokens(const std::string& path, int32_t magic = 20240520, int32_t version = 1) {
  std::string bytes = read_file(path);
  REQUIRE(bytes.size() >= 1024);
  int32_t header[3];
  std::memcpy(header, bytes.data(), sizeof header);
  CHECK(header[0] == magic);
  CHECK(header[1] == version);
  const std::size_t width = version == 7 ? 4 : 2;
  REQUIRE(bytes.size() == 1024 + width * static_cast<std::size_t>(header[2]));
  std::vector<int64_t> tokens(header[2]);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    uint32_t value = 0;
    std::memcpy(&value, bytes.data() + 1024 + width * i, width);
    tokens[i] = value;
  }
  return tokens;
}

std::vector<std::string> shards(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> paths;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.path().filename().string().rfind(prefix, 0) == 0) paths.push_back(entry.path().string());
  std::sort(paths.begin(), paths.end());
  return paths;
}

std::vector<int64_t> all_tokens(const std::vector<std::string>& paths) {
  std::vector<int64_t> tokens;
  for (const auto& path : paths) {
    auto part = shard_tokens(path);
    tokens.insert(tokens.end(), part.begin(), part.end());
  }
  return tokens;
}

}  // namespace

TEST_CASE("ddp-tokenize trains a tokenizer on the Bible and writes shards that decode to the text, the last lines "
          "held out, and a re-run with its tokenizer.model gives the same tokens and leaves no stale shard",
          "[text]") {
  TempDir dir;
  if (!write_kjv_text(dir.file("kjv.txt"))) return;
  const std::string text = read_file(dir.file("kjv.txt"));
  auto run = run_command({bin("ddp-tokenize"), dir.file("out"), "--text", dir.file("kjv.txt"), "--vocab-size", "1000",
                          "--shard-tokens", "60000", "--threads", "2"},
                         std::chrono::seconds(120));
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  CHECK_THAT(run.out, Contains("tokenizer: " + dir.file("out/tokenizer.model") + " (1,000 pieces, bpe, trained on") &&
                          Contains("train with model.vocab_size: 1000") && Contains("MB/s"));
  auto train = shards(dir.file("out"), "kjv_train_"), held_out = shards(dir.file("out"), "kjv_val_");
  CHECK(train.size() == 2);  // about 104,000 tokens in shards of 60,000
  REQUIRE(held_out.size() == 1);
  for (std::size_t i = 0; i + 1 < train.size(); ++i) CHECK(shard_tokens(train[i]).size() == 60000);

  auto tokenizer = ddp::Tokenizer::load(dir.file("out/tokenizer.model"));
  auto train_ids = all_tokens(train), held_out_ids = all_tokens(held_out);
  CHECK(held_out_ids.front() == tokenizer.line_start_id());
  // The held-out split is whole lines at the end, about a tenth of the bytes.
  std::string train_text = ddp::decode_text(tokenizer, train_ids), held_out_text = ddp::decode_text(tokenizer, held_out_ids);
  CHECK(train_text + "\n" + held_out_text + "\n" == text);
  CHECK(held_out_text.size() == Approx(text.size() * 0.1).margin(200));
  CHECK(train_ids == ddp::encode_text(tokenizer, train_text));

  auto again = run_command({bin("ddp-tokenize"), dir.file("out"), "--text", dir.file("kjv.txt"), "--tokenizer",
                            dir.file("out/tokenizer.model"), "--threads", "1"},
                           std::chrono::seconds(120));
  INFO(again.out << again.err);
  REQUIRE(again.exit_code == 0);
  CHECK_THAT(again.out, Contains("from " + dir.file("out/tokenizer.model")));
  auto train_again = shards(dir.file("out"), "kjv_train_");
  CHECK(train_again == std::vector<std::string>{dir.file("out/kjv_train_000000.bin")});  // the others are gone
  CHECK(all_tokens(train_again) == train_ids);
  CHECK(all_tokens(shards(dir.file("out"), "kjv_val_")) == held_out_ids);

  // Nothing held out now: the earlier held-out shards must not pass for this run's.
  auto whole = run_command({bin("ddp-tokenize"), dir.file("out"), "--text", dir.file("kjv.txt"), "--tokenizer",
                            dir.file("out/tokenizer.model"), "--val-fraction", "0"},
                           std::chrono::seconds(120));
  REQUIRE(whole.exit_code == 0);
  CHECK(shards(dir.file("out"), "kjv_val_").empty());
  CHECK(!std::filesystem::exists(dir.file("out/.kjv.partial")));  // where the shards were written first
  CHECK(ddp::decode_text(tokenizer, all_tokens(shards(dir.file("out"), "kjv_train_"))) + "\n" == text);
}

TEST_CASE("ddp-tokenize: a different tokenizer.model in place of the one other names' shards were encoded with is "
          "refused, naming them",
          "[text]") {
  // It used to be replaced: gen's shards then decoded, through exo's tokenizer, to other words.
  TempDir dir;
  if (!write_kjv_text(dir.file("kjv.txt"))) return;
  const std::string text = read_file(dir.file("kjv.txt"));
  const std::size_t exodus = text.find("Now these are the names of the children of Israel");
  REQUIRE(exodus != std::string::npos);
  write_file(dir.file("gen.txt"), text.substr(0, exodus));
  write_file(dir.file("exo.txt"), text.substr(exodus));
  const std::string out = dir.file("out"), model = dir.file("out/tokenizer.model");
  auto tokenize = [&](const std::string& name, std::vector<std::string> more = {"--vocab-size", "500"}) {
    std::vector<std::string> argv = {bin("ddp-tokenize"), out, "--text", dir.file(name + ".txt"), "--threads", "1"};
    argv.insert(argv.end(), more.begin(), more.end());
    return run_command(argv, std::chrono::seconds(120));
  };
  REQUIRE(tokenize("gen").exit_code == 0);
  const std::string gen_model = read_file(model), gen_shard = read_file(dir.file("out/gen_train_000000.bin"));
  auto refused = tokenize("exo");
  INFO(refused.out << refused.err);
  CHECK(refused.exit_code == 2);
  CHECK(refused.err == "ddp-tokenize: error: " + model + " is the tokenizer of gen_*.bin, and this one differs: "
                       "tokenize with it (--tokenizer " + model + ") or into another OUT_DIR\n");
  CHECK(read_file(model) == gen_model);
  CHECK(read_file(dir.file("out/gen_train_000000.bin")) == gen_shard);
  CHECK(shards(out, "exo_").empty());
  CHECK(tokenize("exo", {"--tokenizer", model}).exit_code == 0);  // the same tokenizer: both names decode
  CHECK(read_file(model) == gen_model);
  CHECK(shards(out, "exo_train_").size() == 1);
  // Trained again on the same text with another thread count: other bytes (the count is recorded),
  // the same pieces, so nothing to refuse.
  auto again = run_command({bin("ddp-tokenize"), out, "--text", dir.file("gen.txt"), "--name", "gen2", "--threads", "2",
                            "--vocab-size", "500"},
                           std::chrono::seconds(120));
  INFO(again.out << again.err);
  CHECK(again.exit_code == 0);
  CHECK(read_file(dir.file("out/gen2_train_000000.bin")) == gen_shard);
}

TEST_CASE("ddp-tokenize: each bad input is one line naming it, exit 2, and nothing written", "[text]") {
  TempDir dir;
  write_file(dir.file("words.txt"), "In the beginning\nwas the word\nand the word was\nwith the text\n");
  write_file(dir.file("latin1.txt"), "caf\xE9\n");
  write_file(dir.file("garbage.model"), "not a model at all");
  write_file(dir.file("blank.txt"), "\n \n\t\n\n");
  const std::string out = dir.file("out");
  for (const auto& [args, expected] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--text", dir.file("latin1.txt")}, dir.file("latin1.txt") + ":1: not UTF-8 text (byte 3)"},
           {{"--text", dir.file("missing.txt")}, dir.file("missing.txt") + ": no such file"},
           {{"--text", dir.path()}, dir.path() + ": a directory, not a text file"},
           {{"--text", dir.file("blank.txt")}, dir.file("blank.txt") + ": no text, only blank lines"},
           {{"--text", dir.file("words.txt"), "--tokenizer", dir.file("garbage.model")},
            dir.file("garbage.model") + ": not a SentencePiece model"},
           {{"--text", dir.file("words.txt"), "--tokenizer", dir.path()},
            dir.path() + ": is a directory (--tokenizer names a SentencePiece tokenizer.model)"},
           {{"--text", dir.file("words.txt"), "--vocab-size", "5000"}, "Vocabulary size too high (5000)"},
           {{"--text", dir.file("words.txt"), "--tokenizer", dir.file("garbage.model"), "--vocab-size", "500"},
            "--tokenizer excludes --vocab-size"},
           {{"--text", dir.file("words.txt"), "--model-type", "wordpiece"},
            "--model-type: wordpiece not in {bpe,unigram}"},
           {{"--text", dir.file("words.txt"), "--val-fraction", "0.95"},
            "--val-fraction: expected a number in [0, 0.9], got 0.95"},
           {{"--text", dir.file("words.txt"), "--vocab-size", "300", "--name", "../w"},
            "--name: '../w' is a file name's start, without a '/' (the shards go in OUT_DIR)"},
           {{"--text", dir.file("words.txt"), "--vocab-size", "300", "--name", "w", "--threads", "1", "--shard-tokens",
             "2147483648"},
            "--shard-tokens: expected an integer in [1, 2147483647], got 2147483648"},
           {{"--text", dir.file("words.txt"), "--vocab-size", "0x200"},
            "--vocab-size: expected a base-10 integer, got '0x200'"},
           // SentencePiece's trainer takes no less.
           {{"--text", dir.file("words.txt"), "--character-coverage", "0.97"},
            "--character-coverage: expected a number in [0.98, 1], got 0.97"},
           // NaN passes every range (was: no held-out split, and the earlier one deleted).
           {{"--text", dir.file("words.txt"), "--val-fraction", "nan"}, "--val-fraction: expected a number, got 'nan'"},
           {{"--text", dir.file("words.txt"), "--character-coverage", "nan"},
            "--character-coverage: expected a number, got 'nan'"},
           {{"--text", dir.file("words.txt"), "--val-fraction", "0x1p-3"},
            "--val-fraction: expected a number, got '0x1p-3'"},
           // An empty value is no value (was: --tokenizer "" trained a new tokenizer, --name "" took the default).
           {{"--text", dir.file("words.txt"), "--tokenizer", ""},
            "--tokenizer: expected a value, got an empty one (leave the option out for its default)"},
           {{"--text", dir.file("words.txt"), "--name", ""}, "--name: expected a value, got an empty one"},
           {{"--text", dir.file("words.txt"), "--max-lines", "100"},
            "--max-lines: expected an integer in [101, 1099511627776], got 100"},
           {{"--text", dir.file("words.txt"), "--nme", "w"},
            "unknown option --nme (did you mean --name?); see ddp-tokenize --help"}}) {
    std::vector<std::string> argv = {bin("ddp-tokenize"), out};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = run_command(argv, std::chrono::seconds(60));
    INFO(args.back() << ": " << r.out << r.err);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains("ddp-tokenize: ") && Contains(expected));
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK(r.out.empty());
    CHECK(!std::filesystem::exists(out));
  }
  // An output directory a file stands in the way of: refused before the encoding, with nothing written.
  write_file(dir.file("blocker"), "a file");
  auto blocked = run_command({bin("ddp-tokenize"), dir.file("blocker"), "--text", dir.file("words.txt"),
                              "--vocab-size", "300"}, std::chrono::seconds(60));
  CHECK(blocked.exit_code == 2);
  CHECK_THAT(blocked.err, Contains(dir.file("blocker") + ": cannot be made a directory: a file of that name is in the way"));
  CHECK(read_file(dir.file("blocker")) == "a file");
  // The file in the way above it is named, not the directory asked for.
  auto below = run_command(
      {bin("ddp-tokenize"), dir.file("blocker") + "/sub", "--text", dir.file("words.txt"), "--vocab-size", "300"},
      std::chrono::seconds(60));
  CHECK(below.exit_code == 2);
  CHECK_THAT(below.err, Contains(dir.file("blocker") + "/sub: cannot be made a directory: the file " +
                                 dir.file("blocker") + " is in the way"));
  // A file system that makes no directories there: the user's to fix (2), not an I/O error to retry (74).
  auto proc =
      run_command({bin("ddp-tokenize"), "/proc/ddprun-test", "--text", dir.file("words.txt"), "--vocab-size", "300"},
                  std::chrono::seconds(60));
  CHECK(proc.exit_code == 2);
  CHECK_THAT(proc.err, Contains("error: cannot make the directory /proc/ddprun-test"));
  auto nowhere = run_command({bin("ddp-tokenize"), "", "--text", dir.file("words.txt")}, std::chrono::seconds(60));
  CHECK(nowhere.exit_code == 2);
  CHECK(nowhere.err == "ddp-tokenize: error: OUT_DIR is empty; name the directory for the shards\n");
  // A text in a directory this user may not search: named, exit 2 (was std::filesystem's words, exit 1).
  const std::vector<std::string> as_nobody{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"};
  std::vector<std::string> version = as_nobody;
  version.insert(version.end(), {bin("ddp-tokenize"), "--version"});
  if (geteuid() != 0 || run_command(version).exit_code != 0) {
    WARN("skipped the unsearchable directory's case: it runs the tool as nobody, which needs root and a build "
         "tree nobody may run");
    return;
  }
  auto hidden = run_command({"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", bin("ddp-tokenize"),
                             "/tmp/ddp-test-never-made", "--text", dir.file("words.txt")},
                            std::chrono::seconds(60));
  CHECK(hidden.exit_code == 2);
  CHECK(hidden.err == "ddp-tokenize: error: " + dir.file("words.txt") + ": Permission denied\n");
}

TEST_CASE("ddp-tokenize: lines of any length train the tokenizer, and text comes from a pipe as from a file",
          "[text]") {
  TempDir dir;
  // Every line 6 KB, past SentencePiece's default 4,192-byte limit, which left such lines out of the
  // training unsaid, and refused a text of nothing else ("its check !sentences_.empty() failed").
  std::string text;
  const std::vector<std::string> words{"Qwertyuiop", "asdfgh", "zxcvbnm", "plover", "xyzzy", "frobozz"};
  for (int line = 0; line < 60; ++line) {
    std::string one;
    for (int k = 0; one.size() < 6000; ++k) one += words[static_cast<std::size_t>(line * 7 + k * 3) % words.size()] + " ";
    text += one + "\n";
  }
  write_file(dir.file("long.txt"), text);
  auto trained = run_command({bin("ddp-tokenize"), dir.file("out"), "--text", dir.file("long.txt"), "--vocab-size",
                              "300", "--val-fraction", "0"},
                             std::chrono::seconds(120));
  INFO(trained.out << trained.err);
  REQUIRE(trained.exit_code == 0);
  auto tokenizer = ddp::Tokenizer::load(dir.file("out/tokenizer.model"));
  // Its letters are pieces, not byte fallbacks (<0x00>..<0xFF>, ids 3 to 258): the lines were seen.
  for (int id : tokenizer.encode_line("Qwertyuiop")) CHECK(id > 258);
  // The same text through a pipe: the same tokens.
  auto piped = run_shell("cat " + dir.file("long.txt") + " | " + bin("ddp-tokenize") + " " + dir.file("piped") +
                             " --text /dev/stdin --name long --val-fraction 0 --tokenizer " +
                             dir.file("out/tokenizer.model"),
                         std::chrono::seconds(120));
  INFO(piped.out << piped.err);
  REQUIRE(piped.exit_code == 0);
  CHECK(all_tokens(shards(dir.file("piped"), "long_train_")) == all_tokens(shards(dir.file("out"), "long_train_")));
}

TEST_CASE("ddp-tokenize: a disk that fills part-way leaves the earlier run's shards and tokenizer.model as they "
          "were, and nothing of its own",
          "[text]") {
  if (!can_mount_tmpfs()) {
    WARN("skipped: cannot mount a small tmpfs here (needs root and mount namespaces) to fill a disk");
    return;
  }
  TempDir dir;
  if (!write_kjv_text(dir.file("kjv.txt"))) return;
  const std::string text = read_file(dir.file("kjv.txt"));
  std::string first_lines = text.substr(0, text.size() / 4);
  write_file(dir.file("part.txt"), first_lines.substr(0, first_lines.rfind('\n') + 1));
  // 560 KiB: room for the first run's output (its tokenizer.model alone is 245 KiB), not for the
  // second run's shards beside it. Both run in the tmpfs's own mount namespace, which the copies
  // of the output before and after the second run leave.
  const std::string out = dir.file("out");
  auto tokenize = [&](const std::string& text_file, const std::string& vocab) {
    return bin("ddp-tokenize") + " " + out + " --text " + text_file + " --name kjv --vocab-size " + vocab +
           " --shard-tokens 10000 --threads 1";
  };
  std::filesystem::create_directories(out);
  auto r = run_shell("unshare -m sh -c 'mount -t tmpfs -o size=560k tmpfs " + out + " && " +
                         tokenize(dir.file("part.txt"), "500") + " > /dev/null && cp -a " + out + " " +
                         dir.file("before") + " && " + tokenize(dir.file("kjv.txt"), "600") + "; echo second=$?; cp -a " +
                         out + " " + dir.file("after") + "'",
                     std::chrono::seconds(120));
  INFO(r.out << r.err);
  REQUIRE(std::filesystem::exists(dir.file("before/tokenizer.model")));
  CHECK_THAT(r.out, Contains("second=74"));  // an I/O failure
  CHECK_THAT(r.err, Contains("No space left on device"));
  std::vector<std::string> before, after;
  for (const auto& entry : std::filesystem::directory_iterator(dir.file("before")))
    before.push_back(entry.path().filename().string());
  for (const auto& entry : std::filesystem::directory_iterator(dir.file("after")))
    after.push_back(entry.path().filename().string());
  std::sort(before.begin(), before.end());
  std::sort(after.begin(), after.end());
  CHECK(after == before);  // no staging directory either
  CHECK(std::count_if(before.begin(), before.end(), [](const std::string& f) { return f.rfind("kjv_train_", 0) == 0; }) >= 2);
  CHECK(std::count(before.begin(), before.end(), "kjv_val_000000.bin") == 1);
  CHECK(std::count(before.begin(), before.end(), "tokenizer.model") == 1);
  for (const auto& file : before) {
    INFO(file);
    if (file == ".ddprun.lock") continue;  // it names the run holding it
    CHECK(read_file(dir.file("after/" + file)) == read_file(dir.file("before/" + file)));
  }
}

TEST_CASE("staged shards replace a split's earlier ones whole, and what cannot be moved in is named", "[text]") {
  TempDir dir;
  ddp::ShardSpec spec{dir.path(), "t", 2, 1000};
  ddp::write_token_shards(spec, "train", {{1, 2, 3, 4, 5}});  // three shards of an earlier run
  ddp::ShardSpec staged = spec;
  staged.directory = ddp::staging_directory(spec);
  std::filesystem::create_directories(staged.directory);
  ddp::write_token_shards(staged, "train", {{7, 8}});
  ddp::commit_token_shards(spec, staged.directory, {"train", "val"});
  CHECK(shards(dir.path(), "t_train_") == std::vector<std::string>{dir.file("t_train_000000.bin")});
  CHECK(shard_tokens(dir.file("t_train_000000.bin")) == std::vector<int64_t>{7, 8});
  // Something of the shards' name that cannot be removed (a directory with a file in it): named.
  std::filesystem::create_directories(dir.file("t_val_000000.bin/inside"));
  ddp::write_token_shards(staged, "train", {{9, 10}});
  CHECK_THROWS_AS(ddp::commit_token_shards(spec, staged.directory, {"train", "val"}), ddp::IoError);
  CHECK_THROWS_WITH(ddp::commit_token_shards(spec, staged.directory, {"train", "val"}),
                    Contains(dir.file("t_val_000000.bin") + ": ") && Contains("(replacing the earlier run's shards)"));
}

TEST_CASE("ddp-tokenize: a tokenizer.model it cannot replace is named before anything is written", "[text]") {
  TempDir dir;
  if (!write_kjv_text(dir.file("kjv.txt"))) return;
  std::filesystem::create_directories(dir.file("out/tokenizer.model/inside"));  // a directory in its place
  auto r = run_command({bin("ddp-tokenize"), dir.file("out"), "--text", dir.file("kjv.txt"), "--vocab-size", "400",
                        "--threads", "1"},
                       std::chrono::seconds(120));
  INFO(r.out << r.err);
  CHECK(r.exit_code == 2);
  CHECK(r.err == "ddp-tokenize: error: " + dir.file("out/tokenizer.model") +
                     " is not a file, and the tokenizer goes there: move it, or choose another OUT_DIR\n");
  CHECK(shards(dir.file("out"), "kjv_").empty());  // was: the shards moved in, with no tokenizer beside them
}

TEST_CASE("ddp-tokenize: a SIGTERM while the shards are written leaves the earlier run's output as it was and "
          "nothing of its own, and a second run into the same OUT_DIR is refused", "[text]") {
  TempDir dir;
  if (!write_kjv_text(dir.file("kjv.txt"))) return;
  const std::string out = dir.file("out");
  auto first = run_command({bin("ddp-tokenize"), out, "--text", dir.file("kjv.txt"), "--vocab-size", "400",
                            "--threads", "1", "--shard-tokens", "100000"},
                           std::chrono::seconds(120));
  REQUIRE(first.exit_code == 0);
  auto listing = [&] {
    std::vector<std::string> files;  // the lock file left aside: it stays, naming the last run to hold it
    for (const auto& entry : std::filesystem::directory_iterator(out))
      if (entry.path().filename() != ".ddprun.lock") files.push_back(entry.path().filename().string());
    std::sort(files.begin(), files.end());
    return files;
  };
  const std::vector<std::string> before = listing();
  const std::string tokenizer_before = read_file(dir.file("out/tokenizer.model"));
  // Another tokenizer, a shard a token: many shards to write, and a second run while they are.
  auto r = run_shell(bin("ddp-tokenize") + " " + out + " --text " + dir.file("kjv.txt") +
                         " --vocab-size 500 --threads 1 --shard-tokens 1 2>" + dir.file("err") + " & P=$!; " +
                         until_true("[ $(ls " + out + "/.kjv.partial 2>/dev/null | wc -l) -ge 20 ]", 120) +
                         bin("ddp-tokenize") + " " + out + " --text " + dir.file("kjv.txt") + " --tokenizer " +
                         dir.file("out/tokenizer.model") +
                         " --name other; echo second=$?; kill -TERM $P; wait $P; echo first=$?",
                     std::chrono::seconds(200));
  const std::string err = read_file(dir.file("err"));
  INFO(r.out << r.err << err);
  CHECK_THAT(r.out, Contains("second=2") && Contains("first=143"));
  CHECK_THAT(r.err, Contains("ddp-tokenize: error: OUT_DIR: " + out + " is in use by another run (pid "));
  CHECK_THAT(err, Contains("ddp-tokenize: stopped: by SIGTERM; the shards it was writing are removed, and OUT_DIR "
                           "is as it was"));
  CHECK(listing() == before);  // no staging directory, no shard of the stopped run
  CHECK(read_file(dir.file("out/tokenizer.model")) == tokenizer_before);

  // An OUT_DIR the stopped run made, and the parents it made, are gone with it (was: left, holding
  // only the lock file).
  const std::string fresh = dir.file("fresh/made/out");
  auto into_new = run_shell(bin("ddp-tokenize") + " " + fresh + " --text " + dir.file("kjv.txt") + " --tokenizer " +
                                dir.file("out/tokenizer.model") + " --threads 1 --shard-tokens 1 2>" +
                                dir.file("fresh.err") + " & P=$!; " +
                                until_true("[ $(ls " + fresh + "/.kjv.partial 2>/dev/null | wc -l) -ge 20 ]", 120) +
                                "kill -TERM $P; wait $P; echo status=$?",
                            std::chrono::seconds(200));
  INFO(into_new.out << read_file(dir.file("fresh.err")));
  CHECK(count_lines(into_new.out, "status=143") == 1);
  CHECK_FALSE(std::filesystem::exists(dir.file("fresh")));
}

TEST_CASE("ddp-tokenize: a SIGTERM while it encodes, sent as `timeout` sends it (twice), removes the OUT_DIR it made",
          "[text]") {
  TempDir dir;
  if (!write_kjv_text(dir.file("kjv.txt"))) return;
  REQUIRE(run_command({bin("ddp-tokenize"), dir.file("tok"), "--text", dir.file("kjv.txt"), "--vocab-size", "400",
                       "--threads", "1"},
                      std::chrono::seconds(120))
              .exit_code == 0);
  // 100 copies of Genesis and Exodus: seconds of encoding on one thread, the signal well inside them.
  REQUIRE(
      run_shell("for i in $(seq 100); do cat " + dir.file("kjv.txt") + "; done > " + dir.file("big.txt")).exit_code ==
      0);
  const std::string fresh = dir.file("fresh/made/out");
  // timeout signals its child and then its process group: two SIGTERMs within microseconds.
  auto r = run_shell("timeout 300 " + bin("ddp-tokenize") + " " + fresh + " --text " + dir.file("big.txt") +
                         " --tokenizer " + dir.file("tok/tokenizer.model") + " --threads 1 2>" + dir.file("err") +
                         " & P=$!; " + until_true("[ -e " + fresh + "/.ddprun.lock ]", 60) +
                         "sleep 0.3; kill -TERM $P; wait $P; echo status=$?",
                     std::chrono::seconds(120));
  const std::string err = read_file(dir.file("err"));
  INFO(r.out << r.err << err);
  CHECK(count_lines(r.out, "status=143") == 1);
  CHECK_THAT(err, Contains("ddp-tokenize: stopped: by SIGTERM; the shards it was writing are removed"));
  CHECK_FALSE(std::filesystem::exists(dir.file("fresh")));  // was: left, holding the lock file
}

TEST_CASE("token shards: uint16 up to 65,536 pieces, llm.c's uint32 layout above, a shard cut at shard_tokens",
          "[text]") {
  TempDir dir;
  ddp::ShardSpec spec{dir.path(), "t", 3, 65536};
  auto small = ddp::write_token_shards(spec, "train", {{1, 2}, {65535, 4, 5}});
  REQUIRE(small.size() == 2);
  CHECK(shard_tokens(small[0]) == std::vector<int64_t>{1, 2, 65535});
  CHECK(shard_tokens(small[1]) == std::vector<int64_t>{4, 5});
  spec.vocab_size = 128256;  // Llama 3's
  spec.shard_tokens = 10;
  auto large = ddp::write_token_shards(spec, "train", {{128000, 7}});
  CHECK(large == std::vector<std::string>{dir.file("t_train_000000.bin")});
  CHECK(shard_tokens(large[0], 20240801, 7) == std::vector<int64_t>{128000, 7});
  CHECK(!std::filesystem::exists(dir.file("t_train_000001.bin")));  // the earlier run's second shard
}

}  // namespace DDP_TEST_FILE
