#include "ddp/launch/python_check.h"

#include <array>
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <vector>

#include "ddp/common/error.h"
#include "ddp/common/worker_contract.h"

namespace ddp {
namespace {

// The version, then torch's ("-": none), from package metadata: importing torch would take seconds.
constexpr const char* kProbe =
    "import sys, importlib.util as u\n"
    "v = '-'\n"
    "if u.find_spec('torch') is not None:\n"
    "    try:\n"
    "        import importlib.metadata as m; v = m.version('torch')\n"
    "    except Exception:\n"
    "        v = 'unknown'\n"
    "print('%d.%d.%d' % sys.version_info[:3], v)\n";

std::string shell_quoted(const std::string& word) {
  std::string quoted = "'";
  for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

PythonFacts probe_python(const std::string& python) {
  PythonFacts facts;
  const std::string command = shell_quoted(python) + " -c " + shell_quoted(kProbe) + " 2>/dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return facts;
  std::string output;
  std::array<char, 256> buffer{};
  while (fgets(buffer.data(), static_cast<int>(buffer.size()), pipe)) output += buffer.data();
  if (pclose(pipe) != 0) return facts;
  std::istringstream words(output);
  std::string torch;
  if (!(words >> facts.version >> torch)) facts.version.clear();
  facts.has_torch = !facts.version.empty() && torch != "-";
  if (facts.has_torch) facts.torch_version = torch;
  return facts;
}

bool imports_torch(const std::string& text) {
  // `import torch`, `import os, torch.distributed as dist`, `from torch import nn`: torch anywhere
  // in an import list (was: only first in it).
  static const std::regex import_line(
      R"(^[ \t]*(import[ \t]+([\w.]+([ \t]+as[ \t]+\w+)?[ \t]*,[ \t]*)*torch\b|from[ \t]+torch\b))");
  static const std::regex guard(R"(^try[ \t]*:)");
  // Each line's indentation and text, comments and blank lines left out: a block's header is the
  // nearest line above it indented less.
  std::vector<std::pair<std::size_t, std::string>> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const std::size_t indent = line.find_first_not_of(" \t");
    if (indent != std::string::npos && line[indent] != '#') lines.emplace_back(indent, line.substr(indent));
  }
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (!std::regex_search(lines[i].second, import_line)) continue;
    // One inside a try block is a guarded import (`try: import torch` with a fallback): the script
    // may run without torch. One in an except block is the fallback, which nothing catches.
    bool guarded = false;
    for (std::size_t j = i, indent = lines[i].first; j-- > 0 && indent > 0 && !guarded;)
      if (lines[j].first < indent) {
        indent = lines[j].first;
        guarded = std::regex_search(lines[j].second, guard);
      }
    if (!guarded) return true;
  }
  return false;
}

std::string check_python(const std::string& python, const std::string& script, std::string* torch_version) {
  const PythonFacts facts = probe_python(python);
  if (torch_version) *torch_version = facts.torch_version;
  const std::string choose = "set $" + std::string(env::kPython) + " to the Python to use";
  if (facts.version.empty()) throw UserError(python + " did not run as a Python (" + choose + ")");
  if (!facts.has_torch && !script.empty() && imports_torch(read_text(script)))
    throw UserError("the Python " + python + " (" + facts.version + ") has no torch module, which " + script +
                    " imports, so every rank would fail; " + choose +
                    " (Debian's python3-torch is /usr/bin/python3)");
  return "Python: " + python + " (" + facts.version + ", " +
         (facts.has_torch ? "torch " + facts.torch_version : std::string("no torch")) + "; $" + env::kPython +
         " chooses another)";
}

}  // namespace ddp
