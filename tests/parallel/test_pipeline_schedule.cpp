// Pipeline schedules and stage splits, as plain functions.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include "ddp/common/error.h"
#include "ddp/parallel/pipeline_schedule.h"
#include "ddp/parallel/pipeline_split.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp;
using Catch::Contains;

namespace {

std::string spelled(const std::vector<PipelineAction>& actions) {
  std::string out;
  for (const auto& a : actions) out += (a.kind == PipelineAction::kForward ? "F" : "B") + std::to_string(a.microbatch) + " ";
  return out;
}

}  // namespace

TEST_CASE("GPipe runs every forward, then every backward in the same order") {
  CHECK(spelled(pipeline_schedule("gpipe", 2, 0, 4)) == "F0 F1 F2 F3 B0 B1 B2 B3 ");
  CHECK(peak_in_flight(pipeline_schedule("gpipe", 4, 3, 8)) == 8);
}

TEST_CASE("1F1B warms up P-1-s forwards, alternates, then drains, and stage s holds at most P-s microbatches") {
  CHECK(spelled(pipeline_schedule("1f1b", 2, 0, 4)) == "F0 F1 B0 F2 B1 F3 B2 B3 ");
  CHECK(spelled(pipeline_schedule("1f1b", 2, 1, 4)) == "F0 B0 F1 B1 F2 B2 F3 B3 ");
  for (int stages : {2, 3, 4})
    for (int stage = 0; stage < stages; ++stage)
      for (int m : {1, 2, 8}) {
        auto actions = pipeline_schedule("1f1b", stages, stage, m);
        CHECK(actions.size() == static_cast<std::size_t>(2 * m));
        CHECK(peak_in_flight(actions) == std::min(stages - stage, m));
      }
  CHECK(ideal_bubble_fraction(2, 8) == Approx(1.0 / 9));
}

TEST_CASE("stages split at the named layers, or balanced by parameters, and bad splits name the key") {
  std::vector<std::string> names{"embed", "h.0", "h.1", "h.2", "h.3", "head"};
  std::vector<int64_t> sizes{100, 50, 50, 50, 50, 100};
  CHECK(split_pipeline(names, sizes, 2, "") == std::vector<int>{0, 3, 6});
  CHECK(split_pipeline(names, sizes, 3, "") == std::vector<int>{0, 2, 4, 6});
  CHECK(split_pipeline(names, sizes, 2, "h.3") == std::vector<int>{0, 4, 6});
  CHECK(split_pipeline(names, sizes, 3, "h.0, h.3") == std::vector<int>{0, 1, 4, 6});
  CHECK_THROWS_WITH(split_pipeline(names, sizes, 2, "h.9"), Contains("h.9 is not one of the model's layers"));
  CHECK_THROWS_WITH(split_pipeline(names, sizes, 3, "h.3,h.1"), Contains("h.1 must come after h.3"));
  CHECK_THROWS_WITH(split_pipeline(names, sizes, 3, "h.1"), Contains("3 stages need 2 layer name(s)"));
  CHECK_THROWS_WITH(split_pipeline(names, sizes, 7, ""), Contains("7 stages need at least as many layers"));
  CHECK_THROWS_AS(split_pipeline(names, sizes, 2, "h.9"), ConfigError);
}

}  // namespace DDP_TEST_FILE
