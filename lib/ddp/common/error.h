#pragma once
// Typed errors. Library code throws these; only each main() turns them into an exit status.

#include <stdexcept>
#include <string>

namespace ddp {

/// Something the user can fix (a bad flag, config value, missing or corrupt file).
/// what() is one line that names the culprit and what was expected.
class UserError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A config key or value that is wrong; what() starts with its YAML path.
class ConfigError : public UserError {
 public:
  using UserError::UserError;
};

/// A data, checkpoint or other input file that is missing, truncated or malformed.
class FileError : public UserError {
 public:
  using UserError::UserError;
};

/// An output that could not be written: disk full, an I/O error, a path that cannot be created.
/// Not the user's input at fault, so not a UserError: a restart may well succeed once it is fixed.
class IoError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Memory that ran out on another rank, rethrown here (throw_reported): said as out of memory.
class OutOfMemory : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Whether `e` says memory ran out: std::bad_alloc, OutOfMemory, or LibTorch's allocators' words.
bool is_out_of_memory(const std::exception& e);

/// `e` as text another rank can rethrow as the same kind (throw_reported): for an error one rank
/// meets and every rank stops on, such as a checkpoint writer's, so that each ends with the exit
/// status the one that met it has (usage error, I/O error, out of memory, failure).
std::string error_report(const std::exception& e);

/// Throws what error_report made, as its kind, with `prefix` ("rank 1: ") before its message.
[[noreturn]] void throw_reported(const std::string& report, const std::string& prefix);

/// Throws the error for an output that could not be written because of `errnum`: FileError (a
/// usage error, not restarted) for what a restart would meet again (permissions: EACCES, EPERM,
/// EROFS; a file where a directory of the path goes: ENOTDIR, EEXIST), IoError otherwise (a full
/// disk, a failing device, something in the way that a restart's clean-up may remove).
[[noreturn]] void throw_output_error(const std::string& message, int errnum);

/// Throws UserError(message) unless `condition` holds.
void check_user(bool condition, const std::string& message);

}  // namespace ddp
