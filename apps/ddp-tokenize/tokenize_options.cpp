#include "tokenize_options.h"

#include <climits>
#include <cmath>
#include <cstdint>

#include "ddp/common/cli_values.h"
#include "ddp/common/version.h"

namespace ddp {

void declare_tokenize_options(CLI::App& app, TokenizeArguments& args) {
  app.add_option("out_dir", args.out_dir, "Where tokenizer.model and the shards go (made if missing)")->required();
  app.add_option("--text", args.text, "UTF-8 text files, read as one text, line by line")->required();
  auto* tokenizer = app.add_option("--tokenizer", args.tokenizer,
                                   "An existing SentencePiece model (a tokenizer.model) to use as it is, instead of "
                                   "training one")
                        ->check(not_empty());
  auto* type = app.add_option("--model-type", args.training.model_type, "The tokenizer to train: bpe or unigram")
                   ->check(CLI::IsMember({"bpe", "unigram"}))
                   ->capture_default_str();
  auto* vocab = app.add_option("--vocab-size", args.training.vocab_size,
                               "Pieces of the tokenizer to train (model.vocab_size of the model that reads the shards)")
                    ->transform(integer_in(260, INT32_MAX))  // SentencePiece reads an int
                    ->capture_default_str();
  auto* coverage = app.add_option("--character-coverage", args.training.character_coverage,
                                  "Share of the text's characters that get pieces; the rarest fall back to bytes")
                       ->check(number_in(0.98, 1.0))  // what SentencePiece's trainer takes
                       ->capture_default_str();
  auto* max_lines = app.add_option("--max-lines", args.training.max_lines,
                                   "Lines sampled from a larger text to train the tokenizer on")
                        ->transform(integer_in(101, int64_t{1} << 40))  // SentencePiece's trainer: above 100
                        ->capture_default_str();
  for (auto* option : {type, vocab, coverage, max_lines}) option->excludes(tokenizer);
  app.add_option("--name", args.name,
                 "Shard names are NAME_train_NNNNNN.bin and NAME_val_NNNNNN.bin (default: the "
                 "first text file's name, without its extension)")
      ->check(not_empty())
      ->check([](const std::string& name) -> std::string {  // the shards go in OUT_DIR, and nowhere else
        if (name.find('/') != std::string::npos || name == "." || name == "..")
          return "'" + name + "' is a file name's start, without a '/' (the shards go in OUT_DIR)";
        return "";
      });
  app.add_option("--val-fraction", args.val_fraction,
                 "Held out for evaluation: the last whole lines making up this share of the text; 0: none")
      ->check(number_in(0.0, 0.9))
      ->capture_default_str();
  app.add_option("--shard-tokens", args.shard_tokens, "Tokens a shard holds at most")
      ->transform(integer_in(1, INT32_MAX))  // the header's count is an int32
      ->capture_default_str();
  app.add_option("--threads", args.threads, "Threads to train and encode on (default: every core)")
      ->transform(integer_in(1, 4096));
  app.set_version_flag("--version", version_line(), "Print the versions this binary was built with");
}

}  // namespace ddp
