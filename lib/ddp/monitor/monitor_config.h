#pragma once

namespace ddp {

class ConfigSchema;

/// `monitor:`.
struct MonitorConfig {
  double every_s = 5;       ///< 0: off
  double log_every_s = 60;  ///< its log line at most this often (the first always); 0: never
};

/// Declares the `MonitorConfig` keys, bound to `config`, with their defaults, docs and ranges.
void declare_config(ConfigSchema& schema, MonitorConfig& config);

}  // namespace ddp
