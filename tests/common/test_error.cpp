#include <catch2/catch.hpp>

#include <cerrno>

#include "ddp/common/error.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

TEST_CASE("an output error is a usage error for permissions, an I/O error otherwise") {
  CHECK_THROWS_AS(ddp::throw_output_error("cannot write x", EACCES), ddp::FileError);
  CHECK_THROWS_AS(ddp::throw_output_error("cannot write x", EROFS), ddp::FileError);
  CHECK_THROWS_AS(ddp::throw_output_error("cannot write x", ENOTDIR), ddp::FileError);  // a file in the path
  CHECK_THROWS_AS(ddp::throw_output_error("cannot write x", EEXIST), ddp::FileError);
  CHECK_THROWS_AS(ddp::throw_output_error("cannot write x", ENOSPC), ddp::IoError);
  CHECK_THROWS_AS(ddp::throw_output_error("cannot write x", EIO), ddp::IoError);
  CHECK_THROWS_WITH(ddp::throw_output_error("cannot write x: disk full", ENOSPC), "cannot write x: disk full");
}

}  // namespace DDP_TEST_FILE
