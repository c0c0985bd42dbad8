#include "ddp/common/error.h"

namespace ddp {

void check_user(bool condition, const std::string& message) {
  if (!condition) throw UserError(message);
}

}  // namespace ddp
