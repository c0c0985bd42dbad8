#include "ddp/common/error.h"

#include <cerrno>

namespace ddp {

void check_user(bool condition, const std::string& message) {
  if (!condition) throw UserError(message);
}

void throw_output_error(const std::string& message, int errnum) {
  if (errnum == EACCES || errnum == EPERM || errnum == EROFS) throw FileError(message);
  throw IoError(message);
}

}  // namespace ddp
