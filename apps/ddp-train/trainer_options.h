#pragma once
// ddp-train's command line, declared once: main parses it, ddp-docs writes its man page and
// completion from it.

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "ddp/common/worker_identity.h"

namespace ddp {

/// What ddp-train's command line sets besides the worker's identity.
struct TrainerArguments {
  std::string config;
  std::vector<std::string> overrides;
  bool print_config = false;
};

/// Declares every option of ddp-train on `app`, bound to `args` and `identity`.
void declare_trainer_options(CLI::App& app, TrainerArguments& args, WorkerIdentity& identity);

}  // namespace ddp
