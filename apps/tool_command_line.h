#pragma once
// The command line of each tool (ddp-generate, ddp-tokenize, ddp-export, ddp-report), parsed alike:
// --help and --version print and exit 0, and a parse error exits 2 as every usage error does, not
// with CLI11's own codes.

#include <CLI/CLI.hpp>

#include <iostream>
#include <string>

#include "ddp/common/error.h"
#include "ddp/common/version.h"

namespace ddp {

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
    throw UserError(std::string(e.what()) + "; see " + program + " --help");
  }
  return false;
}

}  // namespace ddp
