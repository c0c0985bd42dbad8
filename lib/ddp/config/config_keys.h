#pragma once
// A saved config (config.yaml) as flat keys, for comparing runs: a resume with its checkpoint's
// run (prior_run.h), or the runs of one report (run_report.h).

#include <map>
#include <string>

namespace ddp {

/// section.key → the value as flow YAML ("[256, 128]", "0.01"); no keys for text that is not a
/// YAML map of sections.
std::map<std::string, std::string> config_keys(const std::string& yaml);

}  // namespace ddp
