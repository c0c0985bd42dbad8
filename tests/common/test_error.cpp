#include <catch2/catch.hpp>

#include <cerrno>
#include <new>
#include <stdexcept>

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

TEST_CASE("an error one rank reports is rethrown on another as the same kind, its message after the rank",
          "[common][errors]") {
  auto rethrown = [](const std::exception& e) {
    try {
      ddp::throw_reported(ddp::error_report(e), "rank 1: ");
    } catch (const std::exception& again) {
      return std::make_pair(std::string(again.what()), ddp::error_report(again));
    }
    FAIL("throw_reported returned");
    return std::make_pair(std::string(), std::string());
  };
  // Each kind keeps its kind (the report's first letter), whatever class of it was thrown.
  CHECK(rethrown(ddp::FileError("x.pt: truncated")) == std::make_pair(std::string("rank 1: x.pt: truncated"),
                                                                        std::string("Urank 1: x.pt: truncated")));
  CHECK(rethrown(ddp::IoError("disk full")).second == "Irank 1: disk full");
  CHECK(rethrown(std::bad_alloc()).second == "Mrank 1: std::bad_alloc");
  CHECK(rethrown(std::runtime_error("DefaultCPUAllocator: can't allocate memory: you tried")).second[0] == 'M');
  CHECK(rethrown(std::logic_error("odd")).second == "Frank 1: odd");
  CHECK_THROWS_AS(ddp::throw_reported(ddp::error_report(ddp::IoError("x")), ""), ddp::IoError);
  CHECK_THROWS_AS(ddp::throw_reported(ddp::error_report(std::bad_alloc()), ""), ddp::OutOfMemory);
  CHECK(ddp::is_out_of_memory(ddp::OutOfMemory("rank 1: std::bad_alloc")));
  CHECK_FALSE(ddp::is_out_of_memory(std::runtime_error("rank 1: odd")));
}

}  // namespace DDP_TEST_FILE
