#pragma once
// torchrun's ways to name what each worker runs, so that its command lines work with ddprun in its
// place: `train.py ARGS` (under Python), `-m MODULE ARGS`, `--run-path train.py ARGS` and
// `--no-python PROGRAM ARGS`. Each takes every word after the script as the script's own.

#include <string>
#include <vector>

namespace ddp {

/// How the script word is run.
enum class ScriptKind {
  kPython,      ///< python3 -u SCRIPT ARGS (torchrun's default)
  kModule,      ///< python3 -u -m MODULE ARGS (-m, --module)
  kRunPath,     ///< runpy.run_path(SCRIPT) as __main__ (--run-path)
  kExecutable,  ///< SCRIPT ARGS, no interpreter (--no-python)
};

/// The worker's command line for `words` (the script, then its arguments). The Python is
/// $DDPRUN_PYTHON, else python3 on PATH (torchrun runs its own interpreter; this is the one a user's
/// shell would run). Throws UserError for a script, program or Python that is not there.
std::vector<std::string> script_command(ScriptKind kind, const std::vector<std::string>& words);

/// torchrun's --redirects/--tee value for each of `local_ranks`: "3" for all, or "0:1,2:3" by local
/// rank (others 0). Values are 0 none, 1 stdout, 2 stderr, 3 both. Throws UserError naming `option`.
std::vector<int> parse_stream_choice(const std::string& option, const std::string& value, int local_ranks);

}  // namespace ddp
