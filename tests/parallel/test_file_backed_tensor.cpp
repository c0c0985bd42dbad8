// Tensors whose memory is an unlinked file (file_backed_tensor.h): written and read like any, no
// file left behind, and a directory that cannot hold one named in the error.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <filesystem>

#include "ddp/common/error.h"
#include "ddp/parallel/file_backed_tensor.h"
#include "support/subprocess.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using Catch::Contains;

TEST_CASE("a file-backed tensor holds what is written to it, leaves no file, and a bad directory is named",
          "[parallel][memory]") {
  ddp::test::TempDir dir;
  {
    torch::Tensor t = ddp::file_backed_empty({1000, 16}, torch::kFloat, dir.path());
    REQUIRE(t.is_contiguous());
    t.copy_(torch::arange(16000, torch::kFloat).view({1000, 16}));
    CHECK(t[999][15].item<float>() == 15999.0f);
    CHECK(t.sum().item<double>() == Approx(16000.0 * 15999 / 2));
    CHECK(std::filesystem::is_empty(dir.path()));  // unlinked from the start
  }
  CHECK(ddp::file_backed_empty({0, 16}, torch::kFloat, dir.path()).numel() == 0);
  const std::string missing = dir.file("no/such/dir");
  CHECK_THROWS_WITH(ddp::file_backed_empty({4, 4}, torch::kFloat, missing),
                    Contains("cannot make a scratch file in " + missing));
}

}  // namespace DDP_TEST_FILE
