#pragma once
// The environment contract between the launcher and every worker (torchrun's variables and ours).

#include <map>
#include <string>
#include <vector>

namespace ddp {

/// Who one worker is and where it meets the others.
struct WorkerIdentity {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  int group_rank = 0;  ///< node rank
  int group_world_size = 1;
  std::string master_addr;
  int master_port = 0;
  std::string run_id;
  int restart_count = 0;
  int max_restarts = 0;
  std::string store_path;  ///< set: meet through a FileStore there instead of MASTER_ADDR:MASTER_PORT
};

/// The variables the launcher sets for a worker, by name.
std::map<std::string, std::string> worker_variables(const WorkerIdentity& identity);

/// `base` ("KEY=VALUE" entries) with `variables` set, replacing any earlier values.
std::vector<std::string> merge_environment(const std::vector<std::string>& base,
                                           const std::map<std::string, std::string>& variables);

/// The launcher's own environment as "KEY=VALUE" entries.
std::vector<std::string> current_environment();

}  // namespace ddp
