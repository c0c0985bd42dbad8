// model.init_from is read by every rank on its own node, only the part it keeps (Note [Deferred
// initialisation]): ranks whose copy is not rank 0's stop, named, where copies agree.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "ddp/loop/same_weights.h"
#include "ddp/model/model_registry.h"
#include "ddp/model/python_state_dict.h"
#include "ddp/model/weights_fingerprint.h"
#include "support/subprocess.h"
#include "support/thread_ranks.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using Catch::Contains;

TEST_CASE("model.init_from: ranks whose weights are not rank 0's stop, named, and copies of a file or a Hugging "
          "Face directory agree",
          "[deferred]") {
  ddp::test::TempDir dir;
  // Two checkpoints of one model (two seeds), each as model.pt and as a directory, and copies.
  ddp::ModelConfig config;
  config.name = "mlp";
  config.mlp.hidden = {64, 32};
  for (const auto& [name, seed] : {std::pair<std::string, uint64_t>{"a", 1}, {"b", 2}}) {
    ddp::ModelContext context;
    context.seed = seed;
    auto model = ddp::make_model(config, context);
    std::filesystem::create_directories(dir.file(name));
    ddp::save_model(*model, dir.file(name));
  }
  std::filesystem::copy(dir.file("a"), dir.file("a_copy"));
  CHECK(ddp::weights_fingerprint(dir.file("a")) == ddp::weights_fingerprint(dir.file("a_copy")));
  CHECK(ddp::weights_fingerprint(dir.file("a/model.pt")) == ddp::weights_fingerprint(dir.file("a_copy/model.pt")));
  CHECK(ddp::weights_fingerprint(dir.file("a/model.pt")) != ddp::weights_fingerprint(dir.file("b/model.pt")));
  CHECK(ddp::weights_fingerprint(dir.file("a")) != ddp::weights_fingerprint(dir.file("b")));

  auto run = [](const std::vector<std::string>& paths) {
    return ddp::test::run_ranks(3, [&paths](int rank, const ddp::Communicator& world) {
      ddp::check_same_weights(world, paths[static_cast<std::size_t>(rank)]);
    });
  };
  for (const std::string file : {"", "/model.pt", "/model.safetensors"}) {
    INFO("model.init_from: a run's directory" << file);
    auto same = run({dir.file("a") + file, dir.file("a_copy") + file, dir.file("a") + file});
    for (const auto& error : same) CHECK(error == "");
    auto other = run({dir.file("a") + file, dir.file("a_copy") + file, dir.file("b") + file});
    for (const auto& error : other)
      CHECK_THAT(error, Contains("model.init_from: ") && Contains(" on rank(s) 2 is not rank 0's (another file at "
                                                                 "that path on their node"));
  }
  auto missing = run({dir.file("a/model.pt"), dir.file("a/model.pt"), dir.file("nowhere.pt")});
  CHECK_THAT(missing[2], Contains("model.init_from: cannot read " + dir.file("nowhere.pt")));
  CHECK_THAT(missing[0], Contains("on rank(s) 2 is not rank 0's"));
}

}  // namespace DDP_TEST_FILE
