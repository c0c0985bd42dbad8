#pragma once
// A mistyped option named with the nearest real one, as every program here says it: ddprun
// (launch_options.cpp) and the tools and ddp-train (apps/tool_command_line.h). Header-only, as
// cli_values.h is, for the launcher that links no LibTorch.

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "ddp/common/text.h"

namespace ddp {

/// "unknown option --nme (did you mean --name?)": `given` up to any '=', and the nearest of
/// `app`'s long options where one is near.
inline std::string unknown_option(const std::string& given, const CLI::App& app) {
  std::vector<std::string> names;
  for (const auto* option : app.get_options())
    for (const auto& long_name : option->get_lnames()) names.push_back("--" + long_name);
  const std::string flag = given.substr(0, given.find('='));
  auto hint = nearest(flag, names);
  return "unknown option " + flag + (hint ? " (did you mean " + *hint + "?)" : "");
}

}  // namespace ddp
