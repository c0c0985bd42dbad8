#pragma once
// One run per output directory: two runs writing the same metrics, checkpoints and model.pt would
// interleave them and prune each other's checkpoints.

#include <optional>
#include <string>

namespace ddp {

/// An exclusive lock on `dir` (a `.ddprun.lock` file in it, held with flock until destruction, so
/// the kernel drops it when the process dies however it dies). The file names the holder.
class DirectoryLock {
 public:
  /// Takes the lock, or throws UserError naming `what` (the config key), `dir` and the holder's pid
  /// and host. IoError (FileError for permissions) if the lock file cannot be created.
  DirectoryLock(const std::string& dir, const std::string& what);
  ~DirectoryLock();
  /// Who holds `dir`'s lock now ("pid N on HOST"), or nullopt when no one does; makes nothing, and
  /// holds nothing once it returns (a shared lock for a moment, to see).
  static std::optional<std::string> holder(const std::string& dir);
  /// The refusal of a run that finds `dir` held by `holder`.
  static std::string in_use(const std::string& dir, const std::string& what, const std::string& holder);

  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace ddp
