#pragma once
// Which Python runs a torchrun-style script, said once at start, and a script that imports torch
// refused before any rank starts when that Python has none (a pyenv shim first on PATH), rather
// than failing in every rank with ModuleNotFoundError.

#include <string>

namespace ddp {

/// What a Python interpreter is: its version, and the torch it imports.
struct PythonFacts {
  std::string version;  ///< "3.11.2"; empty: it did not run
  bool has_torch = false;
  std::string torch_version;  ///< "1.13.0"; "unknown" where torch has no package metadata
};

/// Asks `python` (a path) without importing torch, which takes seconds: about 0.1 s.
PythonFacts probe_python(const std::string& python);

/// Whether the Python source `text` imports torch (import torch, from torch... at a line's start),
/// outside a try block (a guarded import may do without it).
bool imports_torch(const std::string& text);

/// The line naming `python` for the launcher's log ("Python: PATH (3.11.2, torch 1.13.0)"); throws
/// UserError, naming it and $DDPRUN_PYTHON, when it has no torch and `script` (a file; empty for a
/// module) imports it, or when it does not run.
/// `torch_version`, when given, gets the torch it found ("" for none).
std::string check_python(const std::string& python, const std::string& script, std::string* torch_version = nullptr);

}  // namespace ddp
