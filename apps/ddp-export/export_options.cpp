#include "export_options.h"

#include <cmath>
#include <map>
#include <regex>

#include "ddp/common/cli_values.h"
#include "ddp/common/error.h"
#include "ddp/common/version.h"

namespace ddp {

void declare_export_options(CLI::App& app, ExportArguments& args) {
  app.add_option("run", args.run, "The run directory (its config.yaml says the model)")->required();
  app.add_option("--checkpoint", args.checkpoint,
                 "A checkpoint of the run, any layout (its manifest, data file or their stem); default: the newest "
                 "that verifies, or model.pt when the run kept none or finished after it")
      ->check(not_empty());
  app.add_option("-o,--output", args.output, "Where the Hugging Face directory goes (default: RUN/export-step-N)")
      ->check(not_empty());
  app.add_option("--max-shard-size", args.max_shard_size,
                 "Above this size (5GB, 500MB, 100KB, 2GiB; as in save_pretrained, 5Gb is in bits), model.safetensors is "
                 "split into shards with an index, as save_pretrained does")
      ->capture_default_str();
  app.set_version_flag("--version", version_line(), "Print the versions this binary was built with");
}

int64_t parse_shard_size(const std::string& text) {
  static const std::map<std::string, double> units = {{"", 1},      {"B", 1},          {"KB", 1e3},
                                                      {"MB", 1e6},  {"GB", 1e9},       {"KIB", 1024.0},
                                                      {"MIB", 1048576.0}, {"GIB", 1073741824.0}};
  std::smatch match;
  std::string upper = text;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (std::regex_match(upper, match, std::regex(R"(\s*([0-9]+(\.[0-9]+)?)\s*([KMG]I?B|B)?\s*)"))) {
    // save_pretrained reads a decimal unit ending in a lowercase b (5Gb, 500mb) as bits.
    const std::string unit = match[3];
    const bool bits = unit.size() == 2 && text.find_last_not_of(" \t") != std::string::npos &&
                      text[text.find_last_not_of(" \t")] == 'b';
    const double bytes = std::stod(match[1]) * units.at(unit) / (bits ? 8 : 1);
    if (bytes >= 1 && bytes < 1e18) return static_cast<int64_t>(std::llround(bytes));
  }
  throw UserError("--max-shard-size: expected a size such as 5GB, 500MB or 100KB, got '" + text + "'");
}

}  // namespace ddp
