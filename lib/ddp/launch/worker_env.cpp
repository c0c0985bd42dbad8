#include "ddp/launch/worker_env.h"

extern char** environ;

namespace ddp {

std::map<std::string, std::string> worker_variables(const WorkerIdentity& id) {
  auto str = [](int value) { return std::to_string(value); };
  std::map<std::string, std::string> variables{
      {"RANK", str(id.rank)},
      {"LOCAL_RANK", str(id.local_rank)},
      {"WORLD_SIZE", str(id.world_size)},
      {"LOCAL_WORLD_SIZE", str(id.local_world_size)},
      {"GROUP_RANK", str(id.group_rank)},
      {"GROUP_WORLD_SIZE", str(id.group_world_size)},
      {"ROLE_RANK", str(id.rank)},
      {"ROLE_WORLD_SIZE", str(id.world_size)},
      {"MASTER_ADDR", id.master_addr},
      {"MASTER_PORT", str(id.master_port)},
      {"DDPRUN_RUN_ID", id.run_id},
      {"DDPRUN_RESTART_COUNT", str(id.restart_count)},
      {"DDPRUN_MAX_RESTARTS", str(id.max_restarts)},
      // torch.distributed's env:// init then joins our store as a client under
      // "/worker/attempt_N/" instead of trying to bind MASTER_PORT itself.
      {"TORCHELASTIC_USE_AGENT_STORE", "True"},
      {"TORCHELASTIC_RESTART_COUNT", str(id.restart_count)},
      {"TORCHELASTIC_MAX_RESTARTS", str(id.max_restarts)},
      {"TORCHELASTIC_RUN_ID", id.run_id},
  };
  if (!id.store_path.empty()) variables["DDPRUN_STORE_PATH"] = id.store_path;
  return variables;
}

std::vector<std::string> merge_environment(const std::vector<std::string>& base,
                                           const std::map<std::string, std::string>& variables) {
  std::vector<std::string> merged;
  for (const auto& entry : base) {
    auto name = entry.substr(0, entry.find('='));
    if (!variables.count(name)) merged.push_back(entry);
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
