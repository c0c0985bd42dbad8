#pragma once
// bash completion for ddprun and ddp-train, from the launcher's option declarations and the config
// schema: options, their values' choices, config files and scripts, and `--set KEY=VALUE`.

#include <string>
#include <vector>

#include "ddp/config/config_schema.h"
#include "ddp/launch/launch_options.h"

namespace ddp {

/// A bash script defining _ddprun and registering it for ddprun and ddp-train, each with its own options.
std::string bash_completion(const std::vector<OptionReference>& launcher_options,
                            const std::vector<OptionReference>& trainer_options,
                            const std::vector<ConfigSchema::SectionReference>& sections);

}  // namespace ddp
