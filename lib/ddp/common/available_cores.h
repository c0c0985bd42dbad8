#pragma once
// CPU cores this process may run on: the launcher splits them among its workers, ddp-train among
// its rank threads.

namespace ddp {

/// CPU cores this process may run on: its affinity mask, and inside a Slurm job no more than the
/// CPUs Slurm allocated to it, which a cluster that binds no task to its CPUs (TaskPlugin=task/none)
/// does not put in the mask.
int available_cores();

/// The rule of available_cores(): `affinity` cores, capped by Slurm's SLURM_CPUS_PER_TASK (this
/// task's), or else SLURM_CPUS_ON_NODE (the job's on this node), where set to a positive count.
int available_cores_given(int affinity, const char* cpus_per_task, const char* cpus_on_node);

}  // namespace ddp
