#pragma once
// `logging:` what a run leaves to look at besides metrics.jsonl.

namespace ddp {

class ConfigSchema;

/// `logging:` TensorBoard event files and the HTML report.
struct LoggingConfig {
  bool tensorboard = true;  ///< rank 0 writes <output_dir>/tb/events.out.tfevents.*
  bool report = true;       ///< rank 0 writes <output_dir>/report.html at each eval and at the end
};

/// Declares the `LoggingConfig` keys, bound to `config`, with their defaults and docs.
void declare_config(ConfigSchema& schema, LoggingConfig& config);

}  // namespace ddp
