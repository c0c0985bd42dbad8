#pragma once
// Slurm's compressed lists, as its environment variables hold them: host lists (a job's node list,
// node[01-04,07]) and count lists (its tasks per node, 2(x3),1). Parsed here, without running
// `scontrol show hostnames`, so that ddprun reads a job's layout in microseconds and needs no Slurm
// binary at run time.

#include <string>
#include <string_view>
#include <vector>

namespace ddp {

/// The host names of a Slurm host list, in order: "a[1-2],b3" → a1, a2, b3. Ranges keep the lower
/// bound's zero padding ("n[001-003]" → n001..n003); several bracket groups multiply out
/// ("x[1-2]y[3-4]" → x1y3, x1y4, x2y3, x2y4). Throws UserError naming the list and the fault.
std::vector<std::string> expand_hostlist(std::string_view list);

/// The counts of a Slurm count list: "2(x3),1" → 2, 2, 2, 1. Throws UserError naming the list.
std::vector<int> expand_counts(std::string_view list);

/// The rendezvous port of step `step_id` (SLURM_STEP_ID; null, or no number: 0) of Slurm job
/// `job_id`, for ddprun (mode A) and ddp-train tasks (mode B) alike: 20000 + (job_id + 1009 ×
/// step_id) % 10000. Every node of a step computes the same one; steps of one job running at once
/// on a node (a sweep of `srun -n1` steps) differ, and so do jobs that share a node, unless their
/// ids are a multiple of 10000 apart (or, for different steps, happen to offset them).
int slurm_master_port(long long job_id, const char* step_id = nullptr);

}  // namespace ddp
