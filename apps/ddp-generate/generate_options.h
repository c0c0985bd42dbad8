#pragma once
// ddp-generate's command line, declared once: main parses it, ddp-docs writes its man page from it.

#include <CLI/CLI.hpp>

#include <string>

#include "ddp/model/token_sampler.h"

namespace ddp {

/// What ddp-generate's command line sets.
struct GenerateArguments {
  std::string run;
  std::string config;
  std::string prompt;  ///< "": a newline for byte-level models, the start of a line for a tokenizer's
  std::string tokenizer;  ///< a SentencePiece model; "": tokenizer.model beside the run's data, if any
  std::string prompt_ids;
  bool ids = false;
  SamplingOptions sampling;
};

/// Declares every option of ddp-generate on `app`, bound to `args`.
void declare_generate_options(CLI::App& app, GenerateArguments& args);

}  // namespace ddp
