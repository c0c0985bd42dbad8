#include "ddp/launch/slurm_env.h"

#include "ddp/common/error.h"
#include "ddp/common/text.h"
#include "ddp/common/slurm_lists.h"

namespace ddp {

std::optional<SlurmLayout> slurm_layout(const std::function<const char*(const char*)>& lookup) {
  const char* job = lookup("SLURM_JOB_ID");
  const char* node = lookup("SLURM_NODEID");
  if (!job || !node) return std::nullopt;
  auto number = [&](const char* name, const char* value, long long low) {
    auto parsed = value ? parse_int(value) : std::nullopt;
    if (!parsed || *parsed < low || *parsed > 1 << 20)
      throw UserError(std::string(name) + "=" + (value ? printable(value, 40) : "") + " is not a count Slurm would set");
    return *parsed;
  };
  SlurmLayout layout;
  long long job_id = number("SLURM_JOB_ID", job, 0);
  const char* nodes_name = lookup("SLURM_STEP_NUM_NODES") ? "SLURM_STEP_NUM_NODES" : "SLURM_NNODES";
  layout.nnodes = static_cast<int>(number(nodes_name, lookup(nodes_name), 1));
  layout.node_rank = static_cast<int>(number("SLURM_NODEID", node, 0));
  const char* list_name = lookup("SLURM_STEP_NODELIST") ? "SLURM_STEP_NODELIST" : "SLURM_JOB_NODELIST";
  const char* list = lookup(list_name);
  if (!list) throw UserError("inside a Slurm job, but neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST is set");
  layout.master_addr = expand_hostlist(list).front();
  layout.master_port = slurm_master_port(job_id);
  const char* step = lookup("SLURM_STEP_ID");
  layout.run_id = "slurm-" + std::to_string(job_id) + (step ? "." + printable(step, 20) : "");
  layout.sources = {
      {"--nnodes", std::to_string(layout.nnodes) + " (" + nodes_name + ")"},
      {"--node-rank", std::to_string(layout.node_rank) + " (SLURM_NODEID)"},
      {"--master-addr", layout.master_addr + " (first of " + list_name + ")"},
      {"--master-port", std::to_string(layout.master_port) + " (20000 + SLURM_JOB_ID % 10000)"},
      {"--run-id", layout.run_id + " (SLURM_JOB_ID.SLURM_STEP_ID)"}};
  return layout;
}

}  // namespace ddp
