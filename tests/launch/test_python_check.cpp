// Which Python runs a torchrun-style script: named at start, and a script that imports torch under a
// Python without it refused in one line before any rank starts. The torch-less Python is Debian's
// own without its site directories (-S), first on PATH as python3, as a pyenv shim would be.
#include <catch2/catch.hpp>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "ddp/launch/python_check.h"
#include "support/subprocess.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp::test;
using Catch::Contains;

namespace {

constexpr const char* kPython = "/usr/bin/python3";

int count_of(const std::string& text, const std::string& needle) {
  int n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// DIR/bin/python3: Debian's Python without dist-packages, so without torch.
std::string torchless_python(const TempDir& dir) {
  std::filesystem::create_directories(dir.file("bin"));
  const std::string path = dir.file("bin/python3");
  std::ofstream(path) << "#!/bin/sh\nexec " << kPython << " -S \"$@\"\n";
  chmod(path.c_str(), 0755);
  return path;
}

}  // namespace

TEST_CASE("imports_torch finds an import of torch anywhere in an import list, and nothing else", "[launch][python]") {
  CHECK(ddp::imports_torch("import torch\n"));
  CHECK(ddp::imports_torch("import os\n  import torch.distributed as dist\n"));
  CHECK(ddp::imports_torch("from torch import nn\n"));
  CHECK(ddp::imports_torch("from torch.nn.parallel import DistributedDataParallel\n"));
  CHECK_FALSE(ddp::imports_torch("import torchvision_like_but_not\nprint('import torch')\n"));
  CHECK_FALSE(ddp::imports_torch("# uses no torch\nimport os\n"));
  CHECK_FALSE(ddp::imports_torch("import torchaudio\n"));
  // Later in an import list (was: passed over, and every rank failed with ModuleNotFoundError).
  CHECK(ddp::imports_torch("import os, sys, torch, torch.distributed as dist\n"));
  CHECK(ddp::imports_torch("import numpy as np, torch\n"));
  // Guarded by try, the script may do without torch (was refused as one that needs it); a fallback
  // in an except block is not guarded by its try.
  CHECK_FALSE(ddp::imports_torch("try:\n    import torch\nexcept ImportError:\n    torch = None\n"));
  CHECK_FALSE(
      ddp::imports_torch("try:\n  import numpy\n  if True:\n    from torch import nn\nexcept ImportError:\n  pass\n"));
  CHECK(ddp::imports_torch("try:\n  from apex import amp\nexcept ImportError:\n  from torch.cuda import amp\n"));
  CHECK(ddp::imports_torch("try:\n    import os\nexcept ImportError:\n    pass\n\n# comment\nimport torch\n"));
  CHECK(ddp::imports_torch("def main():\n    import torch\n"));
  CHECK_FALSE(ddp::imports_torch("import os, torchvision\n"));
}

TEST_CASE("probe_python tells a Python's version and whether it has torch, without importing it", "[launch][python]") {
  if (run_command({kPython, "-c", "import torch"}).exit_code != 0) {
    WARN("SKIPPED: " << kPython << " has no torch (python3-torch is not installed)");
    return;
  }
  auto with = ddp::probe_python(kPython);
  CHECK_THAT(with.version, Catch::Matches(R"(3\.\d+\.\d+)"));
  CHECK(with.has_torch);
  CHECK_FALSE(with.torch_version.empty());
  TempDir dir;
  auto without = ddp::probe_python(torchless_python(dir));
  CHECK(without.version == with.version);
  CHECK_FALSE(without.has_torch);
  CHECK(ddp::probe_python(dir.file("no-such-python")).version.empty());
  // A program that is no Python: one line naming it and how to choose another.
  CHECK_THROWS_WITH(ddp::check_python("/bin/false", ""),
                    Contains("/bin/false did not run as a Python") && Contains("$DDPRUN_PYTHON"));
}

TEST_CASE("ddprun train.py under a python3 without torch first on PATH fails in one line naming it and "
          "DDPRUN_PYTHON before any rank starts, and names the Python it runs otherwise",
          "[launch][python]") {
  if (run_command({kPython, "-c", "import torch"}).exit_code != 0) {
    WARN("SKIPPED: " << kPython << " has no torch (python3-torch is not installed)");
    return;
  }
  TempDir dir;
  const std::string python = torchless_python(dir);
  const std::string marker = dir.file("started");
  std::ofstream(dir.file("train.py")) << "open('" << marker << "', 'a').write('x')\nimport torch\n";
  std::ofstream(dir.file("plain.py")) << "import os\nprint('plain rank', os.environ['RANK'], flush=True)\n";
  const std::string path = "PATH=" + dir.file("bin") + ":" + std::getenv("PATH");

  auto refused = run_command({bin("ddprun"), "--standalone", "--nproc-per-node", "2", dir.file("train.py")},
                             std::chrono::seconds(60), {path, "DDPRUN_PYTHON="});
  INFO(refused.out << refused.err);
  CHECK(refused.exit_code == 2);
  CHECK(count_of(refused.err, "has no torch module") == 1);
  CHECK_THAT(refused.err, Contains(python) && Contains("$DDPRUN_PYTHON") && Contains("train.py"));
  CHECK_FALSE(std::filesystem::exists(marker));  // no rank ran

  // A script that needs no torch runs under it, the Python named; DDPRUN_PYTHON chooses Debian's.
  auto plain = run_command({bin("ddprun"), "--standalone", "--nproc-per-node", "2", dir.file("plain.py")},
                           std::chrono::seconds(60), {path, "DDPRUN_PYTHON="});
  INFO(plain.out << plain.err);
  CHECK(plain.exit_code == 0);
  CHECK_THAT(plain.err, Contains("Python: " + python + " (3.") && Contains("no torch"));
  CHECK(count_of(plain.out, "plain rank") == 2);
  auto chosen = run_command({bin("ddprun"), "--standalone", "--nproc-per-node", "1", dir.file("train.py")},
                            std::chrono::seconds(60), {path, std::string("DDPRUN_PYTHON=") + kPython});
  INFO(chosen.out << chosen.err);
  CHECK(chosen.exit_code == 0);
  CHECK_THAT(chosen.err, Contains(std::string("Python: ") + kPython) && Contains(", torch ") && !Contains("no torch"));
  CHECK(std::filesystem::exists(marker));
}

}  // namespace DDP_TEST_FILE
