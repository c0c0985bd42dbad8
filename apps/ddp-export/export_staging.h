#pragma once
// Note [An export replaces its directory whole]: the export is written into a directory beside the
// output and takes its place in one rename (an exchange, when an earlier export is there), so an
// export cut short (a Ctrl-C, a full disk) leaves the earlier one as it was, never one file of
// each. Entries of the earlier directory that no export writes (a README the user added, a Hub
// clone's .git) move into the new one by rename; an export's own kinds do not (a tokenizer.model
// the run has no longer). A crash between those renames and the exchange leaves the user's
// entries in the staging directory, `.NAME.export-XXXXXX`, beside the output.

#include <filesystem>
#include <string>

namespace ddp {

/// Whether `file` (a name in a directory) is of a kind an export writes.
bool written_by_an_export(const std::string& file);

/// The directory an export is written into, beside `output`, and its move into `output`'s place.
/// Removed with what it holds when destroyed, unless it holds entries of the user's it could not
/// put back (then named in the error).
class ExportStaging {
 public:
  /// FileError (exit 2) where no directory can be made there, or where `output` is a mount point,
  /// which no rename leaves.
  explicit ExportStaging(std::filesystem::path output);
  ~ExportStaging();
  ExportStaging(const ExportStaging&) = delete;
  ExportStaging& operator=(const ExportStaging&) = delete;

  const std::string& path() const { return path_; }

  /// The staged export in the output's place, with the earlier directory's entries of no export's
  /// kind moved into it, its mode and owner kept. Then staging holds the earlier export's own
  /// files, for discard_earlier().
  void move_into_place();

  /// Removes the earlier export's files, left in staging by move_into_place(): before a held signal
  /// ends the process, so that no hidden directory stays beside the output.
  void discard_earlier();

 private:
  bool exchange();
  /// Moves `moved` back from staging to the output; what stays is kept from removal and named.
  void put_back(const std::vector<std::string>& moved);

  std::filesystem::path output_;
  std::string path_;
  std::string stranded_;  // put_back()'s failures: entries of the user's left in staging
};

}  // namespace ddp
