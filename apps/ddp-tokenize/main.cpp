// ddp-tokenize: text into token shards that ddprun trains on, through a SentencePiece tokenizer
// trained here (or given), with no Python in the path. Writes OUT_DIR/tokenizer.model (which
// ddp-generate finds beside the shards) and llm.c-format shards with a held-out split.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <system_error>
#include <thread>

#include "ddp/common/atomic_file.h"
#include "ddp/common/directory_lock.h"
#include "ddp/common/error.h"
#include "ddp/common/interruption.h"
#include "ddp/common/made_directories.h"
#include "ddp/common/run_main.h"
#include "ddp/common/worker_contract.h"
#include "ddp/text/parallel_encoder.h"
#include "ddp/text/text_corpus.h"
#include "ddp/text/token_shard_writer.h"
#include "tokenize_options.h"
#include "tool_command_line.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

std::string megabytes(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MB", static_cast<double>(bytes) / 1e6);
  return text;
}

std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// A run's staging directory (ddp::staging_directory): made empty (an interrupted run's is cleared
// first), and removed with whatever is left in it when the run ends, written or failed.
class StagingDirectory {
 public:
  explicit StagingDirectory(std::string path) : path_(std::move(path)) {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
    ddp::make_output_directory(path_);
  }
  ~StagingDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  StagingDirectory(const StagingDirectory&) = delete;
  StagingDirectory& operator=(const StagingDirectory&) = delete;

 private:
  std::string path_;
};

void move_into_place(const std::string& from, const std::string& to) {
  std::error_code error;
  std::filesystem::rename(from, to, error);
  if (error) throw ddp::IoError(to + ": cannot be replaced: " + error.message());
  ddp::fsync_directory(std::filesystem::path(to).parent_path().string());
}

int64_t token_count(const std::vector<std::vector<uint32_t>>& chunks) {
  int64_t n = 0;
  for (const auto& chunk : chunks) n += static_cast<int64_t>(chunk.size());
  return n;
}

// An OUT_DIR this run made (with any parents) goes again when the run ends without its output (a
// signal, a full disk): "OUT_DIR is as it was" holds for one that was not there. Made once the lock
// is held, so that it is gone before the lock is let go, and a run refused by the lock removes nothing.
struct MadeDirectory {
  std::string path, first_made;  // first_missing_directory's answer before it was made; "" for none
  ~MadeDirectory() {
    if (first_made.empty() || std::uncaught_exceptions() == 0) return;
    std::error_code ignored;
    std::filesystem::remove(std::filesystem::path(path) / ".ddprun.lock", ignored);
    if (std::filesystem::remove(path, ignored)) ddp::remove_made_parents(path, first_made);  // only while empty
  }
};

}  // namespace

int main(int argc, char** argv) {
  ddp::ProgramErrors errors;
  errors.program = "ddp-tokenize";
  errors.failure = "failed";
  return ddp::run_main(errors, [&]() -> int {
    namespace fs = std::filesystem;
    ddp::TokenizeArguments args;
    CLI::App app("ddp-tokenize: text into token shards for ddprun, through a SentencePiece tokenizer", "ddp-tokenize");
    ddp::declare_tokenize_options(app, args);
    if (!ddp::parse_tool_command_line(app, argc, argv, "ddp-tokenize")) return ddp::kExitSuccess;
    if (args.out_dir.empty()) throw ddp::UserError("OUT_DIR is empty; name the directory for the shards");
    const int threads = args.threads > 0 ? args.threads : std::max(1u, std::thread::hardware_concurrency());
    const std::string name = !args.name.empty() ? args.name : fs::path(args.text.front()).stem().string();

    // Everything that can be refused is, before anything is written.
    ddp::TextCorpus corpus = ddp::read_text_corpus(args.text, args.val_fraction);
    std::string model_bytes;
    std::string how;
    if (!args.tokenizer.empty()) {
      if (fs::is_directory(args.tokenizer))
        throw ddp::FileError(args.tokenizer + ": is a directory (--tokenizer names a SentencePiece tokenizer.model)");
      if (!fs::is_regular_file(args.tokenizer)) throw ddp::FileError(args.tokenizer + ": no such file (--tokenizer)");
      model_bytes = ddp::read_whole_file(args.tokenizer);
      how = "from " + args.tokenizer;
    } else {
      auto start = Clock::now();
      args.training.threads = threads;
      model_bytes = ddp::Tokenizer::train(corpus.training_lines(), args.training);
      char text[128];
      std::snprintf(text, sizeof text, "%s, trained on %s lines in %.1f s", args.training.model_type.c_str(),
                    with_commas(std::min(static_cast<int64_t>(corpus.held_out_from), args.training.max_lines)).c_str(),
                    seconds_since(start));
      how = text;
    }
    const std::string model_path = (fs::path(args.out_dir) / "tokenizer.model").string();
    if (fs::exists(model_path) && !fs::is_regular_file(model_path))
      throw ddp::UserError(model_path + " is not a file, and the tokenizer goes there: move it, or choose another OUT_DIR");
    ddp::Tokenizer tokenizer = ddp::Tokenizer::from_serialized(model_bytes, args.tokenizer.empty() ? model_path
                                                                                                  : args.tokenizer);

    // Shards of other names here were encoded with this tokenizer.model; a different one in its place
    // would decode them to the wrong text (shards of this name are replaced with it).
    if (fs::is_regular_file(model_path) && ddp::read_whole_file(model_path) != model_bytes) {
      std::string others;
      for (const auto& other : ddp::shard_names_in(args.out_dir))
        if (other != name) others += (others.empty() ? "" : ", ") + other + "_*.bin";
      // Trained again on the same text with another --threads: other bytes, the same pieces.
      auto same_pieces = [&] {
        try {
          return ddp::Tokenizer::load(model_path).same_pieces(tokenizer);
        } catch (const ddp::FileError&) {
          return false;
        }
      };
      if (!others.empty() && !same_pieces())
        throw ddp::UserError(model_path + " is the tokenizer of " + others + ", and this one differs: tokenize with "
                             "it (--tokenizer " + model_path + ") or into another OUT_DIR");
    }
    // From here a signal stops the run between two chunks or shards, and what it wrote goes with it
    // (was: killed while encoding, a new OUT_DIR stayed, holding the lock file).
    ddp::DeferredInterruption deferred(
        "ddp-tokenize: stopping, and removing what this run wrote (again to stop at once)\n",
        "the shards it was writing are removed, and OUT_DIR is as it was");
    const std::string made_from = ddp::first_missing_directory(args.out_dir);
    ddp::make_output_directory(args.out_dir);
    // Two runs into one OUT_DIR would clear each other's staging and commit over each other's shards.
    ddp::DirectoryLock lock(args.out_dir, "OUT_DIR");
    MadeDirectory made{args.out_dir, made_from};
    const bool tty = isatty(STDERR_FILENO) != 0;
    auto last_line = Clock::now();
    auto progress = [&](int64_t done) {
      ddp::stop_if_interrupted();
      if (!tty && seconds_since(last_line) < 10) return;  // a log gets a line every 10 s, a terminal one in place
      last_line = Clock::now();
      std::fprintf(stderr, "%sddp-tokenize: encoded %s of %s (%.0f%%)%s", tty ? "\r" : "", megabytes(done).c_str(),
                   megabytes(corpus.bytes).c_str(),
                   100.0 * static_cast<double>(done) / static_cast<double>(corpus.bytes),
                   tty ? "" : "\n");
    };
    // The two splits are encoded apart, so that no chunk of lines straddles them.
    auto start = Clock::now();
    const std::vector<std::string_view> train_lines = corpus.training_lines();
    const auto cut = corpus.lines.begin() + static_cast<std::ptrdiff_t>(corpus.held_out_from);
    const std::vector<std::string_view> held_out_lines(cut, corpus.lines.end());
    int64_t train_bytes = 0;
    auto train = ddp::encode_lines(tokenizer, train_lines, threads, [&](int64_t done) {
      progress(done);
      train_bytes = done;
    });
    auto held_out = ddp::encode_lines(tokenizer, held_out_lines, threads,
                                      [&](int64_t done) { progress(train_bytes + done); });
    const double encode_seconds = seconds_since(start);
    if (tty) std::fprintf(stderr, "\n");

    // Everything is written beside the output first, and moved in (renames) only once it all was:
    // a disk that fills part-way leaves an earlier run's shards and tokenizer.model as they were,
    // never some shards of each run beside either tokenizer.
    ddp::ShardSpec spec{args.out_dir, name, args.shard_tokens, tokenizer.vocab_size()};
    ddp::ShardSpec staged = spec;
    staged.directory = ddp::staging_directory(spec);
    ddp::stop_if_interrupted();
    StagingDirectory staging(staged.directory);
    auto train_paths = ddp::write_token_shards(staged, "train", train);
    auto held_out_paths = ddp::write_token_shards(staged, "val", held_out);
    const std::string staged_model = (fs::path(staged.directory) / "tokenizer.model").string();
    const bool new_model = args.tokenizer.empty() || !fs::exists(model_path) || !fs::equivalent(args.tokenizer, model_path);
    if (new_model) ddp::write_file_atomically(staged_model, model_bytes);
    ddp::stop_if_interrupted();  // the last point to stop at: the moves below are done whole
    {
      ddp::SignalsHeld held;  // a signal now takes effect once the output is whole
      // No held-out split: an earlier run's is removed too, or it would pass for this one's.
      ddp::commit_token_shards(spec, staged.directory, {"train", "val"});
      if (new_model) move_into_place(staged_model, model_path);  // last: the shards' tokenizer with them
      deferred.end();
    }

    const int64_t train_tokens = token_count(train), held_out_tokens = token_count(held_out);
    std::printf("tokenizer: %s (%s pieces, %s)\n", model_path.c_str(), with_commas(tokenizer.vocab_size()).c_str(),
                how.c_str());
    std::printf("train: %s tokens in %zu shard(s), %s\n", with_commas(train_tokens).c_str(), train_paths.size(),
                (fs::path(args.out_dir) / (name + "_train_*.bin")).c_str());
    if (!held_out_paths.empty())
      std::printf("val: %s tokens in %zu shard(s), %s\n", with_commas(held_out_tokens).c_str(), held_out_paths.size(),
                  (fs::path(args.out_dir) / (name + "_val_*.bin")).c_str());
    std::printf("encoded %s in %.2f s on %d thread(s): %.1f MB/s, %.2f bytes a token\n",
                megabytes(corpus.bytes).c_str(), encode_seconds, threads,
                static_cast<double>(corpus.bytes) / 1e6 / std::max(encode_seconds, 1e-9),
                static_cast<double>(corpus.bytes) /
                    static_cast<double>(std::max<int64_t>(train_tokens + held_out_tokens, 1)));
    std::printf("train with model.vocab_size: %lld (or more)\n", static_cast<long long>(tokenizer.vocab_size()));
    return ddp::kExitSuccess;
  });
}
