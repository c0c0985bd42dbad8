// ddp-report: one report.html for one or several runs, overlaid to compare them.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "ddp/common/run_main.h"
#include "ddp/common/version.h"
#include "ddp/common/worker_contract.h"
#include "ddp/record/run_report.h"

int main(int argc, char** argv) {
  std::vector<std::string> runs;
  std::string output = "report.html";
  CLI::App app("ddp-report: writes one HTML report of the given runs (their run.output_dir), overlaid", "ddp-report");
  app.add_option("runs", runs, "Run directories (each with metrics.jsonl)")->required();
  app.add_option("-o,--output", output, "The page to write (default report.html)");
  app.set_version_flag("--version", ddp::version_line());
  ddp::ProgramErrors errors;
  errors.program = "ddp-report";
  errors.failure = "error";
  return ddp::run_main(errors, [&]() -> int {
    try {
      app.parse(argc, argv);
    } catch (const CLI::CallForVersion&) {
      std::cout << ddp::version_line() << "\n";
      return ddp::kExitSuccess;
    } catch (const CLI::ParseError& e) {
      return app.exit(e);
    }
    ddp::write_run_report(output, runs);
    std::printf("ddp-report: wrote %s (%zu run(s))\n", output.c_str(), runs.size());
    return ddp::kExitSuccess;
  });
}
