#pragma once
// A worker's environment: the launcher's own, with the worker's identity (worker_variables) set over it.

#include <map>
#include <string>
#include <vector>

namespace ddp {

/// `base` ("KEY=VALUE" entries) with `variables` set, replacing any earlier values.
std::vector<std::string> merge_environment(const std::vector<std::string>& base,
                                           const std::map<std::string, std::string>& variables);

/// The launcher's own environment as "KEY=VALUE" entries.
std::vector<std::string> current_environment();

}  // namespace ddp
