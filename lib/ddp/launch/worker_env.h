#pragma once
// A worker's environment: the launcher's own, with the worker's identity (worker_variables) set over it.

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace ddp {

/// `base` ("KEY=VALUE" entries) with `variables` set, replacing any earlier values.
std::vector<std::string> merge_environment(const std::vector<std::string>& base,
                                           const std::map<std::string, std::string>& variables);

/// The launcher's own environment as "KEY=VALUE" entries.
std::vector<std::string> current_environment();

/// What torchrun's agent sets for its workers unless the launcher's environment (`lookup`) has it:
/// NCCL's asynchronous error handling, under the name the workers' torch reads. `torch_version`:
/// a Python script's torch ("1.13.0"), as probed; empty when unknown (any other program), which gets
/// the newer name. Not for ddp-train, which sets the name its own LibTorch reads.
std::map<std::string, std::string> torchrun_defaults(const std::string& torch_version,
                                                     const std::function<const char*(const char*)>& lookup);

}  // namespace ddp
