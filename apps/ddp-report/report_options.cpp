#include "report_options.h"

#include "ddp/common/version.h"

namespace ddp {

void declare_report_options(CLI::App& app, ReportArguments& args) {
  app.add_option("runs", args.runs, "Run directories (each with metrics.jsonl)")->required();
  app.add_option(
         "-o,--output", args.output,
         "The page to write; never one of the runs' own files but an earlier page (.html), such as its report.html")
      ->capture_default_str();
  app.set_version_flag("--version", version_line(), "Print the versions this binary was built with");
}

}  // namespace ddp
