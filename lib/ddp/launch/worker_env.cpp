#include "ddp/launch/worker_env.h"

#include "ddp/common/worker_contract.h"

extern char** environ;

namespace ddp {

std::map<std::string, std::string> worker_variables(const WorkerIdentity& id) {
  auto str = [](int value) { return std::to_string(value); };
  std::map<std::string, std::string> variables{
      {env::kRank, str(id.rank)},
      {env::kLocalRank, str(id.local_rank)},
      {env::kWorldSize, str(id.world_size)},
      {env::kLocalWorldSize, str(id.local_world_size)},
      {env::kGroupRank, str(id.group_rank)},
      {env::kGroupWorldSize, str(id.group_world_size)},
      {env::kRoleRank, str(id.rank)},
      {env::kRoleWorldSize, str(id.world_size)},
      {env::kMasterAddr, id.master_addr},
      {env::kMasterPort, str(id.master_port)},
      {env::kRunId, id.run_id},
      {env::kRestartCount, str(id.restart_count)},
      {env::kMaxRestarts, str(id.max_restarts)},
      // torch.distributed's env:// init then joins our store as a client under
      // "/worker/attempt_N/" instead of trying to bind MASTER_PORT itself.
      {env::kUseAgentStore, "True"},
      {env::kElasticRestartCount, str(id.restart_count)},
      {env::kElasticMaxRestarts, str(id.max_restarts)},
      {env::kElasticRunId, id.run_id},
  };
  if (!id.store_path.empty()) variables[env::kStorePath] = id.store_path;
  return variables;
}

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
