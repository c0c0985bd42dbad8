#include "support/python_fixtures.h"

#include <catch2/catch.hpp>

#include "support/subprocess.h"

namespace ddp::test {

std::string python_fixture(const std::string& name) {
  static TempDir dir;
  static bool made = false;
  if (!made) {
    auto r = run_command({"/usr/bin/python3", std::string(DDP_SOURCE_DIR) + "/tests/support/python_fixtures.py",
                          dir.path()},
                         std::chrono::seconds(120));
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    made = true;
  }
  return dir.file(name);
}

}  // namespace ddp::test
