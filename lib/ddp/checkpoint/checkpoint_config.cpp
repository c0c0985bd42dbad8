#include "ddp/checkpoint/checkpoint_config.h"

#include "ddp/config/config_schema.h"

namespace ddp {

void declare_config(ConfigSchema& schema, CheckpointConfig& config) {
  schema.section("checkpoint", "When rank 0 saves, how many it keeps, where a run resumes from.");
  schema.add("checkpoint.every_steps", &config.every_steps, "save every this many optimizer steps; 0: off").min(0)
      .max(kMaxSteps);
  schema.add("checkpoint.every_epochs", &config.every_epochs, "save every this many epochs; 0: off").min(0)
      .max(kMaxEpochs);
  schema.add("checkpoint.keep_last", &config.keep_last, "complete checkpoints kept; older ones are deleted").min(1)
      .max(1e6);
  // Any path is a valid value, so there are no choices to check.
  schema.add("checkpoint.resume", &config.resume,
             "auto: the newest complete checkpoint, if any; never: start afresh; else a checkpoint's path")
      .non_empty()
      .file_path({"auto", "never"});
  schema.add("checkpoint.format", &config.format,
             "whole: one file, rank 0 writes it; sharded: each shard's ranks write their part, a resume reads "
             "what it needs; auto: sharded where the state is split (dist.shard, dist.pipeline, dist.tensor, sharded "
             "embedding tables), else whole")
      .choices({"auto", "whole", "sharded"});
}

}  // namespace ddp
