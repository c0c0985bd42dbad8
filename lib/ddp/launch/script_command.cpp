#include "ddp/launch/script_command.h"

#include <cstdlib>
#include <filesystem>

#include "ddp/common/error.h"
#include "ddp/common/text.h"
#include "ddp/common/worker_contract.h"
#include "ddp/launch/machine.h"

namespace ddp {
namespace {

std::string python_interpreter() {
  const char* chosen = std::getenv(env::kPython);
  std::string python = chosen && *chosen ? chosen : "python3";
  std::string found = find_executable(python);
  if (found.empty())
    throw UserError(std::string("cannot run the script: ") + python + " is not " +
                    (chosen && *chosen ? "an executable ($" + std::string(env::kPython) + ")"
                                       : "on PATH (set $" + std::string(env::kPython) + " to the Python to use)"));
  return found;
}

// runpy.run_path as torchrun's --run-path calls it, in a Python of its own: argv as the script expects.
constexpr const char* kRunPath =
    "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')";

}  // namespace

std::vector<std::string> script_command(ScriptKind kind, const std::vector<std::string>& words) {
  const std::string& script = words.at(0);
  std::vector<std::string> command;
  if (kind == ScriptKind::kExecutable) {
    if (find_executable(script).empty()) throw UserError("--no-python: program not found or not executable: " + script);
  } else if (kind != ScriptKind::kModule && !std::filesystem::is_regular_file(script)) {
    throw UserError("script not found: " + script);
  } else {
    command = {python_interpreter(), "-u"};  // unbuffered, as torchrun: lines reach the console as printed
    if (kind == ScriptKind::kModule) command.push_back("-m");
    if (kind == ScriptKind::kRunPath) command.insert(command.end(), {"-c", kRunPath});
  }
  command.insert(command.end(), words.begin(), words.end());
  return command;
}

std::vector<int> parse_stream_choice(const std::string& option, const std::string& value, int local_ranks) {
  auto streams = [&](const std::string& text) {
    auto n = parse_int(text);
    if (!n || *n < 0 || *n > 3)
      throw UserError(option + ": expected 0 (none), 1 (stdout), 2 (stderr) or 3 (both), or LOCAL_RANK:N,... as "
                      "0:1,1:2, got '" + value + "'");
    return static_cast<int>(*n);
  };
  if (value.find(':') == std::string::npos) return std::vector<int>(local_ranks, streams(value));
  std::vector<int> chosen(local_ranks, 0);
  for (const auto& pair : split(value, ',')) {
    auto colon = pair.find(':');
    auto rank = parse_int(pair.substr(0, colon));
    if (colon == std::string::npos || !rank || *rank < 0 || *rank >= local_ranks)
      throw UserError(option + ": expected LOCAL_RANK:N with local ranks 0.." + std::to_string(local_ranks - 1) +
                      ", got '" + value + "'");
    chosen[*rank] = streams(pair.substr(colon + 1));
  }
  return chosen;
}

}  // namespace ddp
