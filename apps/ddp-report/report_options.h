#pragma once
// ddp-report's command line, declared once: main parses it, ddp-docs writes its man page from it.

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace ddp {

/// What ddp-report's command line sets.
struct ReportArguments {
  std::vector<std::string> runs;
  std::string output = "report.html";
};

/// Declares every option of ddp-report on `app`, bound to `args`.
void declare_report_options(CLI::App& app, ReportArguments& args);

}  // namespace ddp
