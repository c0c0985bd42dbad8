#include "ddp/common/error.h"

#include <cerrno>
#include <new>

namespace ddp {

void check_user(bool condition, const std::string& message) {
  if (!condition) throw UserError(message);
}

bool is_out_of_memory(const std::exception& e) {
  // LibTorch's allocators say it in a c10::Error; the standard library throws std::bad_alloc.
  const std::string what = e.what();
  return dynamic_cast<const std::bad_alloc*>(&e) != nullptr || dynamic_cast<const OutOfMemory*>(&e) != nullptr ||
         what.find("can't allocate memory") != std::string::npos ||
         what.find("not enough memory") != std::string::npos ||  // LibTorch 2.x's CPU allocator
         what.find("CUDA out of memory") != std::string::npos;
}

// A report is one letter for the kind, then the message.
std::string error_report(const std::exception& e) {
  const char kind = dynamic_cast<const UserError*>(&e) ? 'U'
                    : dynamic_cast<const IoError*>(&e) ? 'I'
                    : is_out_of_memory(e)             ? 'M'
                                                      : 'F';
  return kind + std::string(e.what());
}

void throw_reported(const std::string& report, const std::string& prefix) {
  const std::string message = prefix + (report.empty() ? "" : report.substr(1));
  switch (report.empty() ? 'F' : report[0]) {
    case 'U': throw UserError(message);
    case 'I': throw IoError(message);
    case 'M': throw OutOfMemory(message);
    default: throw std::runtime_error(message);
  }
}

void throw_output_error(const std::string& message, int errnum) {
  // A restart would meet these again: permissions, and a file where a directory of the path goes.
  for (int again : {EACCES, EPERM, EROFS, ENOTDIR, EEXIST})
    if (errnum == again) throw FileError(message);
  throw IoError(message);
}

}  // namespace ddp
