#pragma once
// The command line of each tool (ddp-generate, ddp-tokenize, ddp-export, ddp-report), parsed alike:
// --help and --version print and exit 0, and a parse error exits 2 as every usage error does, not
// with CLI11's own codes. ddp-train, which prints more for --help, shares the errors.

#include <CLI/CLI.hpp>

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "ddp/common/cli_unknown_option.h"
#include "ddp/common/error.h"
#include "ddp/common/text.h"
#include "ddp/common/version.h"

namespace ddp {

/// The UserError for a command line CLI11 refused: a mistyped option named with the nearest real
/// one (as ddprun names its own), a `key=value` meant for --set said so, else CLI11's words.
[[noreturn]] inline void throw_command_line_error(const CLI::ParseError& e, const CLI::App& app,
                                                  const std::string& program) {
  if (dynamic_cast<const CLI::ExtrasError*>(&e)) {
    for (const auto& given : app.remaining(true))
      if (given.rfind("-", 0) == 0) throw UserError(unknown_option(given, app) + "; see " + program + " --help");
    const bool sets = app.get_option_no_throw("--set") != nullptr;
    for (const auto& given : app.remaining(true))
      if (sets && given.find('=') != std::string::npos)
        throw UserError("unexpected argument " + given + ": a config key is set with --set " + given + "; see " +
                        program + " --help");
  }
  throw UserError(std::string(e.what()) + "; see " + program + " --help");
}

/// Parses argv into `app`'s options; false once --help or --version has been printed (the tool
/// exits 0). UserError naming `program --help` for a bad command line.
inline bool parse_tool_command_line(CLI::App& app, int argc, char** argv, const std::string& program) {
  try {
    app.parse(argc, argv);
    return true;
  } catch (const CLI::CallForVersion&) {
    std::cout << version_line() << "\n";
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
  } catch (const CLI::ParseError& e) {
    throw_command_line_error(e, app, program);
  }
  return false;
}

}  // namespace ddp
