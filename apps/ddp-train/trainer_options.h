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
  int threads = -1;     ///< --threads: dist.threads, when given
  std::string devices;  ///< --devices: dist.devices, when given ("0,1,2")
};

/// The --set assignments --threads and --devices stand for, after the user's own (which they
/// outrank, being the more specific); throws UserError on a malformed device list.
std::vector<std::string> rank_thread_overrides(const TrainerArguments& args);

/// Declares every option of ddp-train on `app`, bound to `args` and `identity`.
void declare_trainer_options(CLI::App& app, TrainerArguments& args, WorkerIdentity& identity);

}  // namespace ddp
