#pragma once
// The man pages in roff: ddprun(1), ddp-train(1), ddp-generate(1) and ddp-report(1), from their
// programs' option declarations and the config schema.

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

/// ddp-generate(1): sampling from a trained language model, its options and exit status.
std::string ddp_generate_man_page(const std::vector<OptionReference>& options, const std::string& version);

/// ddp-tokenize(1): text into token shards, its options and exit status.
std::string ddp_tokenize_man_page(const std::vector<OptionReference>& options, const std::string& version);

/// ddp-export(1): a checkpoint as a Hugging Face directory, its options and exit status.
std::string ddp_export_man_page(const std::vector<OptionReference>& options, const std::string& version);

/// ddp-report(1): the HTML report of runs, its options and exit status.
std::string ddp_report_man_page(const std::vector<OptionReference>& options, const std::string& version);

}  // namespace ddp
