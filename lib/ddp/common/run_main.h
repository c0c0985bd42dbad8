#pragma once
// The one try/catch of every program (ninja's exit_status.h idea): the exception a run ends with
// becomes one line on stderr and the exit status the launcher and job scripts give meaning to
// (worker_contract.h). ddprun, ddp-train and ddp-report share it, so none maps errors its own way.

#include <exception>
#include <functional>
#include <string>

namespace ddp {

/// How a program names itself and its failures on stderr.
struct ProgramErrors {
  const char* program = "";  ///< each line starts "PROGRAM: "
  /// What an exception other than UserError and IoError is called ("internal error", "failed").
  const char* failure = "internal error";
  /// Said after the program's name ("rank 3: "), asked when the error is printed; nothing when unset.
  std::function<std::string()> prefix;
  /// True once leaving through destructors could hang (Gloo's teardown can wait a whole timeout
  /// for collectives that will never finish): the process then ends with _Exit after the message.
  std::function<bool()> exit_at_once;
  /// Called before the message is printed: rank threads of one process let only the first failure
  /// speak (Note [Ranks as threads]); a later one waits here for the process to end.
  std::function<void()> claim;
  /// Called before an _Exit: what a destructor skipped would have told others (a rank's last
  /// collective count, which its peers name it by).
  std::function<void()> before_exit;
  /// What "out of memory" advises, for the run's settings; the advice for any run when unset or "".
  std::function<std::string()> memory_advice;
};

/// Runs `body` and returns its exit status. An exception becomes "PROGRAM: PREFIX KIND: what" and
/// kExitUsage (UserError, "error"), kExitIoError (IoError, "I/O error") or kExitFailure (any other
/// std::exception, `failure`, without LibTorch's backtrace).
int run_main(const ProgramErrors& errors, const std::function<int()>& body);

/// The exit status run_main gives `error` (not null): what a run records of its failure before the
/// exception goes on up.
int exit_status_of(const std::exception_ptr& error);

}  // namespace ddp
