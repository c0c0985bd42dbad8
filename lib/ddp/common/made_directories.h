#pragma once
// A tool that makes its output directory, and its parents, takes them back when it ends without
// output: a failed or stopped run leaves the file system as it found it.

#include <string>

namespace ddp {

/// The outermost of `dir` and its parents that does not exist yet, as an absolute path: what making
/// `dir` makes. "" when `dir` exists.
std::string first_missing_directory(const std::string& dir);

/// Removes `dir`'s parents, innermost first, up to and including `first_made` (first_missing_directory's
/// answer before `dir` was made), each only while it is empty: another run may have begun in one.
void remove_made_parents(const std::string& dir, const std::string& first_made);

}  // namespace ddp
