#include "ddp/launch/worker_env.h"

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

std::vector<std::string> current_environment() {
  std::vector<std::string> entries;
  for (char** e = environ; *e; ++e) entries.emplace_back(*e);
  return entries;
}

}  // namespace ddp
