#include "ddp/launch/log_layout.h"

#include <stdlib.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "ddp/common/error.h"
#include "ddp/launch/output_relay.h"

namespace ddp {

// Creates a log directory and its parents; UserError naming the cause, a dangling symbolic link on
// the way by name (create_directories says only "File exists" of one).
void make_log_directory(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code failed, ignored;
  fs::create_directories(path, failed);
  if (!failed) return;
  for (fs::path at = path; !at.empty() && at != at.parent_path(); at = at.parent_path())
    if (fs::is_symlink(at, ignored) && !fs::exists(at, ignored))
      throw UserError("--log-dir: " + at.string() + " is a symbolic link to " + fs::read_symlink(at, ignored).string() +
                      ", which does not exist; create its target or choose another --log-dir");
  throw UserError("--log-dir: cannot create " + path + ": " + failed.message());
}

// LOG_DIR under --redirects/--tee (Note [Log layout]): --log-dir, or without it a fresh
// $TMPDIR/ddprun_XXXXXX (torchrun's torchelastic_XXXXXX); where the logs go is said once on the console.
std::string make_torchrun_log_dir(const std::string& log_dir, const std::string& run_id) {
  std::string dir = log_dir;
  if (dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string base = tmp && *tmp ? tmp : "/tmp";
    make_log_directory(base);
    dir = base + "/ddprun_XXXXXX";
    if (!mkdtemp(dir.data()))
      throw UserError("--redirects: cannot create a log directory in " + base + ": " + std::strerror(errno));
  }
  say("workers' logs (--redirects/--tee) go to " + dir + "/" + run_id);
  return dir;
}

}  // namespace ddp
