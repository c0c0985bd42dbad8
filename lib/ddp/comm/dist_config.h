#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ddp {

class ConfigSchema;

/// `dist:` the process group and gradient sync.
struct DistConfig {
  std::string backend = "auto";  ///< auto | gloo | nccl
  std::string device = "auto";   ///< auto | cpu | cuda: where the model and batches live
  double timeout_s = 300;        ///< a collective or rendezvous that waits longer fails
  double bucket_cap_mb = 25;     ///< gradient bucket size
  double first_bucket_mb = 1;    ///< small, so the first all-reduce starts early in backward
  bool overlap = true;           ///< all-reduce buckets during backward
  bool shared_memory = true;     ///< sum gradients through shared memory within each node
  int64_t threads = 0;           ///< ranks as threads of one process (0: a process per rank)
  std::vector<int64_t> devices;  ///< the rank threads' CUDA devices, one rank each
};

/// How many ranks this process runs as threads (Note [Ranks as threads]): one per dist.devices
/// entry, else dist.threads; 0 when each rank is a process of its own.
int rank_threads(const DistConfig& config);

/// Declares the `DistConfig` keys, bound to `config`, with their defaults, docs and ranges.
void declare_config(ConfigSchema& schema, DistConfig& config);

}  // namespace ddp
