#include "ddp/launch/worker_env.h"

#include <cstdio>

#include "ddp/common/worker_contract.h"

extern char** environ;

namespace ddp {

std::vector<std::string> merge_environment(const std::vector<std::string>& base,
                                           const std::map<std::string, std::string>& variables) {
  std::vector<std::string> merged;
  for (const auto& entry : base) {
    auto name = entry.substr(0, entry.find('='));
    if (!variables.count(name) && name != env::kRdzvSecret) merged.push_back(entry);  // the secret stays here
  }
  for (const auto& [name, value] : variables) merged.push_back(name + "=" + value);
  return merged;
}

namespace {

// "2.1.0+cu118" is before 2.2; "2.2.0", "10.0" and what does not parse are not.
bool torch_before_2_2(const std::string& version) {
  int major = 0, minor = 0;
  if (std::sscanf(version.c_str(), "%d.%d", &major, &minor) != 2) return false;
  return major < 2 || (major == 2 && minor < 2);
}

}  // namespace

std::map<std::string, std::string> torchrun_defaults(const std::string& torch_version,
                                                     const std::function<const char*(const char*)>& lookup) {
  std::map<std::string, std::string> defaults;
  const bool older = torch_before_2_2(torch_version);
  // One name for each torch: the other would only draw a deprecation warning from every rank.
  const char* name = older ? env::kNcclAsyncErrorHandlingBefore22 : env::kNcclAsyncErrorHandling;
  if (!lookup(env::kNcclAsyncErrorHandling) && !lookup(env::kNcclAsyncErrorHandlingBefore22)) defaults[name] = "1";
  return defaults;
}

std::vector<std::string> current_environment() {
  std::vector<std::string> entries;
  for (char** e = environ; *e; ++e) entries.emplace_back(*e);
  return entries;
}

}  // namespace ddp
