#pragma once
// ddp-tokenize's command line, declared once: main parses it, ddp-docs writes its man page from it.

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "ddp/text/sentencepiece_tokenizer.h"

namespace ddp {

/// What ddp-tokenize's command line sets.
struct TokenizeArguments {
  std::string out_dir;
  std::vector<std::string> text;
  std::string tokenizer;  ///< an existing tokenizer.model; "" trains one
  std::string name;       ///< shard prefix; "" = the first text file's stem
  double val_fraction = 0.1;
  int64_t shard_tokens = 100'000'000;
  int threads = 0;  ///< 0 = every core
  TokenizerTraining training;
};

/// Declares every option of ddp-tokenize on `app`, bound to `args`.
void declare_tokenize_options(CLI::App& app, TokenizeArguments& args);

}  // namespace ddp
