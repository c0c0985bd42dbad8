#pragma once
// ddprun(1) and ddp-train(1) in roff, from the launcher's option declarations and the config schema.

#include <string>
#include <vector>

#include "ddp/config/config_schema.h"
#include "ddp/launch/launch_options.h"

namespace ddp {

/// ddprun(1): usage, every launcher option, the workers' environment, exit status.
std::string ddprun_man_page(const std::vector<OptionReference>& options, const std::string& version);

/// ddp-train(1): its options and every config key, section by section, with type, default and meaning.
std::string ddp_train_man_page(const std::vector<OptionReference>& options,
                               const std::vector<ConfigSchema::SectionReference>& sections, const std::string& version);

}  // namespace ddp
