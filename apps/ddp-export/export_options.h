#pragma once
// ddp-export's command line, declared once: main parses it, ddp-docs writes its man page from it.

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

namespace ddp {

/// What ddp-export's command line sets.
struct ExportArguments {
  std::string run;
  std::string checkpoint;  ///< "": the run's newest checkpoint that verifies, else its model.pt
  std::string output;      ///< "": RUN/export-step-N
  std::string max_shard_size = "5GB";  ///< save_pretrained's default and spelling
};

/// Declares every option of ddp-export on `app`, bound to `args`.
void declare_export_options(CLI::App& app, ExportArguments& args);

/// Bytes in a size as save_pretrained's max_shard_size spells it: 5GB, 500MB, 100KB, 2GiB, 1000, and
/// 800Kb for 100KB (a decimal unit ending in a lowercase b is bits);
/// UserError naming --max-shard-size otherwise.
int64_t parse_shard_size(const std::string& text);

}  // namespace ddp
