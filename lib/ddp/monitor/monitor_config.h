#pragma once

namespace ddp {

class ConfigSchema;

/// `monitor:`.
struct MonitorConfig {
  double every_s = 5;  ///< 0: off
};

/// Declares the `MonitorConfig` keys, bound to `config`, with their defaults, docs and ranges.
void declare_config(ConfigSchema& schema, MonitorConfig& config);

}  // namespace ddp
