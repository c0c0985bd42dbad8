#pragma once

#include <cstdint>
#include <string>

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
};

/// Declares the `DistConfig` keys, bound to `config`, with their defaults, docs and ranges.
void declare_config(ConfigSchema& schema, DistConfig& config);

}  // namespace ddp
