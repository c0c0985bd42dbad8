#include "export_staging.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <regex>
#include <vector>

#include "ddp/common/atomic_file.h"
#include "ddp/common/error.h"

namespace ddp {

namespace fs = std::filesystem;

bool written_by_an_export(const std::string& file) {
  static const std::regex kinds(
      R"(model\.pt|model_scripted\.pt|model\.safetensors|model-\d{5}-of-\d{5}\.safetensors|)"
      R"(model\.safetensors\.index\.json|config\.json|config\.yaml|tokenizer\.model|normalization\.json|)"
      R"(.*\.tmp\..*)");
  return std::regex_match(file, kinds);
}

ExportStaging::ExportStaging(fs::path output) : output_(output.has_filename() ? output : output.parent_path()) {
  // A link to the directory: the directory is what the export takes the place of, beside it.
  std::error_code ec;
  if (fs::is_symlink(output_, ec) && fs::is_directory(output_, ec)) output_ = fs::canonical(output_);
  const fs::path parent = output_.has_parent_path() ? output_.parent_path() : fs::path(".");
  make_output_directory(parent.string());
  std::string pattern = (parent / ("." + output_.filename().string() + ".export-XXXXXX")).string();
  if (!mkdtemp(pattern.data())) {
    const int error = errno;
    // As make_output_directory says it: the user's to fix (exit 2), not an I/O error to retry.
    if (error == ENOENT)
      throw FileError("cannot make the directory " + output_.string() +
                      " (nor a staging directory beside "
                      "it): " +
                      std::strerror(error) + " (a file system that makes no directories there?)");
    throw_output_error("cannot make a directory like " + pattern + ": " + std::strerror(error), error);
  }
  path_ = pattern;
  // mkdtemp makes it 0700: the export is for others to read, as a directory made the usual way is.
  const mode_t mask = umask(0);
  umask(mask);
  chmod(path_.c_str(), 0777 & ~mask);
  // Renames do not cross file systems: an output that is a mount point could not take the
  // export's place (nor give the user's entries to it), after the whole export was written.
  struct stat own {
  }, beside{};
  if (::stat(output_.c_str(), &own) == 0 && ::stat(path_.c_str(), &beside) == 0 && own.st_dev != beside.st_dev) {
    fs::remove(path_, ec);
    path_.clear();
    throw FileError("-o " + output_.string() +
                    " is a mount point (another file system than the directory it is in): an "
                    "export takes its directory's place by rename, which cannot cross file systems; export into a "
                    "directory inside it");
  }
}

ExportStaging::~ExportStaging() {
  std::error_code ignored;
  if (!path_.empty() && stranded_.empty()) fs::remove_all(path_, ignored);
}

void ExportStaging::put_back(const std::vector<std::string>& moved) {
  for (const auto& name : moved)
    if (std::rename((fs::path(path_) / name).c_str(), (output_ / name).c_str()) != 0)
      stranded_ += (stranded_.empty() ? "" : ", ") + name;
}

void ExportStaging::move_into_place() {
  struct stat earlier {};
  const bool exists = ::stat(output_.c_str(), &earlier) == 0;
  // The user's entries move by rename: the same files, owners and links at no cost whatever their
  // size (a copy took minutes and doubled hard-linked ones).
  std::vector<std::string> theirs, moved;
  if (exists && S_ISDIR(earlier.st_mode))
    for (const auto& entry : fs::directory_iterator(output_)) {
      const std::string name = entry.path().filename().string();
      if (!written_by_an_export(name) && name != ".ddprun.lock") theirs.push_back(name);
    }
  auto fail = [&](const std::string& what, int error) {
    put_back(moved);
    throw_output_error(what + ": " + std::strerror(error) +
                           (stranded_.empty() ? ""
                                              : "; " + stranded_ + " could not be put back and stay in " + path_ +
                                                    ": move them into " + output_.string() + " by hand"),
                       error);
  };
  for (const auto& name : theirs) {
    if (std::rename((output_ / name).c_str(), (fs::path(path_) / name).c_str()) != 0)
      fail("cannot move " + (output_ / name).string() + " into the export", errno);
    moved.push_back(name);
  }
  // The directory itself as it was: its mode, and its owner where we may give it (root may).
  if (exists && ::chmod(path_.c_str(), earlier.st_mode & 07777) == 0 && earlier.st_uid != ::geteuid())
    (void)::chown(path_.c_str(), earlier.st_uid, earlier.st_gid);
  if (!exists ? std::rename(path_.c_str(), output_.c_str()) != 0 : !exchange())
    fail("cannot move the export into " + output_.string(), errno);
  fsync_directory(output_.has_parent_path() ? output_.parent_path().string() : ".");
}

void ExportStaging::discard_earlier() {
  std::error_code ignored;
  fs::remove_all(path_, ignored);
}

// The staged export and the earlier one trade places. A file system with no exchange (NFS, many
// FUSE ones: EINVAL) gets two renames instead: the earlier export into staging's name, then the
// new one into the output's; a failure between them puts the earlier one back. The output is
// missing for that moment, never half of each. DDPRUN_TEST_NO_RENAME_EXCHANGE: that path, tested.
bool ExportStaging::exchange() {
  const bool can_exchange = std::getenv("DDPRUN_TEST_NO_RENAME_EXCHANGE") == nullptr;
  if (can_exchange && renameat2(AT_FDCWD, path_.c_str(), AT_FDCWD, output_.c_str(), RENAME_EXCHANGE) == 0) return true;
  if (can_exchange && errno != EINVAL && errno != ENOSYS) return false;
  const std::string aside = path_ + ".earlier";
  if (std::rename(output_.c_str(), aside.c_str()) != 0) return false;
  if (std::rename(path_.c_str(), output_.c_str()) != 0) {
    const int error = errno;
    std::rename(aside.c_str(), output_.c_str());
    errno = error;
    return false;
  }
  path_ = aside;  // the earlier export, which the destructor removes
  return true;
}

}  // namespace ddp
