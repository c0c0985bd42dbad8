// ddp-report: one report.html for one or several runs, overlaid to compare them.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "ddp/common/error.h"
#include "ddp/common/run_main.h"
#include "ddp/common/worker_contract.h"
#include "ddp/record/run_report.h"
#include "report_options.h"
#include "tool_command_line.h"

int main(int argc, char** argv) {
  ddp::ReportArguments args;
  CLI::App app("ddp-report: writes one HTML report of the given runs (their run.output_dir), overlaid", "ddp-report");
  ddp::declare_report_options(app, args);
  ddp::ProgramErrors errors;
  errors.program = "ddp-report";
  errors.failure = "error";
  return ddp::run_main(errors, [&]() -> int {
    if (!ddp::parse_tool_command_line(app, argc, argv, "ddp-report")) return ddp::kExitSuccess;
    for (const auto& note : ddp::write_run_report(args.output, args.runs))
      std::fprintf(stderr, "ddp-report: warning: %s\n", note.c_str());
    std::printf("ddp-report: wrote %s (%zu run(s))\n", args.output.c_str(), args.runs.size());
    return ddp::kExitSuccess;
  });
}
