#pragma once
// report.html: one self-contained page per run (or several runs overlaid): curves, throughput, the
// all-reduce split, per-rank step times, the system monitor, the config and how the run ended.

#include <string>
#include <vector>

#include "ddp/record/metrics_reader.h"

namespace ddp {

/// The page for `runs` (one, or several to compare), with no network or script needed to view it.
std::string render_report(const std::vector<RunRecords>& runs);

/// Reads each run directory and writes the page to `path` atomically. UserError when a directory
/// holds no run; FileError or IoError when the page cannot be written. Returns what the page says
/// of the files themselves, for a command line to say too: lines that are no record, a file with
/// none.
std::vector<std::string> write_run_report(const std::string& path, const std::vector<std::string>& run_dirs);

}  // namespace ddp
