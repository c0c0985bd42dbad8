#pragma once

#include <cstdint>
#include <string>

namespace ddp {

class ConfigSchema;

/// `checkpoint:` when rank 0 saves, how many it keeps, where a run resumes from.
struct CheckpointConfig {
  int64_t every_steps = 0;    ///< 0: off
  int64_t every_epochs = 1;   ///< 0: off
  int64_t keep_last = 2;
  std::string resume = "auto";  ///< auto (newest complete one, if any) | never | PATH
  std::string format = "auto";  ///< auto (sharded under dist.shard, else whole) | whole | sharded
};

/// Declares the `CheckpointConfig` keys, bound to `config`, with their defaults, docs and ranges.
void declare_config(ConfigSchema& schema, CheckpointConfig& config);

}  // namespace ddp
