#include "ddp/common/error.h"

#include <cerrno>

namespace ddp {

void check_user(bool condition, const std::string& message) {
  if (!condition) throw UserError(message);
}

void throw_output_error(const std::string& message, int errnum) {
  // A restart would meet these again: permissions, and a file where a directory of the path goes.
  for (int again : {EACCES, EPERM, EROFS, ENOTDIR, EEXIST})
    if (errnum == again) throw FileError(message);
  throw IoError(message);
}

}  // namespace ddp
