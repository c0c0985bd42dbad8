// data.dataset: the format registry lists what registered, and an unknown name gets the nearest one.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include "ddp/common/error.h"
#include "ddp/data/dataset_format.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp;
using Catch::Contains;
using Catch::Equals;

TEST_CASE("the format registry lists every format, samples formats with a loader", "[data]") {
  CHECK(dataset_format_names() == std::vector<std::string>{"criteo", "csv", "graph", "idx", "npy", "synthetic", "tokens"});
  for (const auto& name : dataset_format_names()) {
    INFO(name);
    const DatasetFormat& format = find_dataset_format(name);
    CHECK((format.kind == DatasetKind::kGraph) == (name == "graph"));
    CHECK(static_cast<bool>(format.load_splits) == (format.kind == DatasetKind::kSamples));
  }
}

TEST_CASE("an unknown format names the nearest, and a graph has no sample splits", "[data]") {
  CHECK_THROWS_WITH(find_dataset_format("nyp"),
                    Equals("data.dataset: unknown format \"nyp\" (did you mean npy?); available: criteo, csv, graph, idx, npy, "
                           "synthetic, tokens"));
  DataConfig config;
  config.dataset = "graph";
  CHECK_THROWS_AS(load_dataset_splits(config, 10), ConfigError);
  CHECK_THROWS_WITH(load_dataset_splits(config, 10), Contains("data.dataset: graph holds no samples to split"));
}

TEST_CASE("the synthetic format loads through the registry", "[data]") {
  DataConfig config;
  config.dataset = "synthetic";
  config.synthetic_train_samples = 30;
  config.synthetic_test_samples = 10;
  DatasetSplits splits = load_dataset_splits(config, 3);
  CHECK(splits.train.size() == 30);
  REQUIRE(splits.eval);
  CHECK(splits.eval->size() == 10);
  config.eval_split = "train";
  CHECK(load_dataset_splits(config, 3).eval->size() == 30);
}

}  // namespace DDP_TEST_FILE
