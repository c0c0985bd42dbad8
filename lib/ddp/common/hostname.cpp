#include "ddp/common/hostname.h"

#include <unistd.h>

#include <climits>

namespace ddp {

std::string hostname() {
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "localhost";
  return name;
}

}  // namespace ddp
