// The generic schema alone, bound to a struct of its own: parse, override, validate, dump, document.
#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>
#include <vector>

#include "ddp/config/config_schema.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

TEST_CASE("ConfigSchema on its own", "[config]") {
  struct Small {
    int64_t count = 3;
    std::string mode = "a";
  } small;
  ddp::ConfigSchema schema;
  schema.section("s", "A small section.");
  schema.add("s.count", &small.count, "how many").min(1).max(10);
  schema.add("s.mode", &small.mode, "which").choices({"a", "b"});
  CHECK(schema.markdown() ==
        "### `s`\n\nA small section.\n\n| key | type | default | meaning |\n|---|---|---|---|\n"
        "| `count` | integer | `3` | how many (in [1, 10]) |\n"
        "| `mode` | string | `a` | which (one of `a`, `b`) |\n");
  schema.apply_override("s.count=11");
  CHECK(schema.problems() == std::vector<std::string>{"s.count: must be in [1, 10], got 11"});
  CHECK(schema.to_yaml() == "s:\n  count: 11\n  mode: a\n");

  bool flag = false;
  CHECK_THROWS_AS(schema.add("toplevel", &flag, ""), std::logic_error);
  std::string other_type = "3";
  CHECK_THROWS_AS(schema.add("s.count", &other_type, ""), std::logic_error);
  CHECK_THROWS_AS(schema.add("s.flag", &flag, "").min(0), std::logic_error);
}

TEST_CASE("a key that two parts read is declared by both and its one value reaches both (Note [Shared keys])",
          "[config]") {
  struct Mlp {
    std::vector<int64_t> hidden = {256, 128};
  } mlp;
  struct Sage {
    std::vector<int64_t> hidden = {256, 128};
    std::string where = "x";
  } sage;
  ddp::ConfigSchema schema;
  schema.add("model.hidden", &mlp.hidden, "mlp: widths").min(1);
  schema.add("model.hidden", &sage.hidden, "graphsage: widths");
  schema.add("model.where", &sage.where, "graphsage: where").file_path();
  CHECK(schema.reference().front().keys.size() == 2);
  CHECK(schema.reference().front().keys.front().meaning == "mlp: widths; graphsage: widths (each ≥ 1)");
  schema.apply_override("model.hidden=[8, 4]");
  CHECK(mlp.hidden == std::vector<int64_t>{8, 4});
  CHECK(sage.hidden == std::vector<int64_t>{8, 4});
  CHECK(schema.to_yaml() == "model:\n  hidden: [8, 4]\n  where: x\n");
  // A check added through either declaration holds for the one value.
  schema.apply_override("model.hidden=[0]");
  CHECK(schema.problems() == std::vector<std::string>{"model.hidden[0]: must be >= 1, got 0"});

  CHECK(schema.shared_disagreements().empty());
  std::vector<int64_t> other_default = {1};
  schema.add("model.hidden", &other_default, "");
  CHECK(schema.shared_disagreements() == std::vector<std::string>{"model.hidden: [0] against [0] against [1]"});

  // A path key shared is resolved in every member.
  std::string where_too = "x";
  schema.add("model.where", &where_too, "");
  schema.resolve_paths("/base");
  CHECK(sage.where == "/base/x");
  CHECK(where_too == "/base/x");
}

TEST_CASE("a value outside the choices names the nearest choice, when one is near", "[config]") {
  std::string format = "npy";
  ddp::ConfigSchema schema;
  schema.add("data.format", &format, "which").choices({"csv", "idx", "npy"});
  schema.apply_override("data.format=nyp");
  CHECK(schema.problems() ==
        std::vector<std::string>{"data.format: must be one of csv, idx, npy, got \"nyp\" (did you mean npy?)"});
  schema.apply_override("data.format=parquet");
  CHECK(schema.problems() == std::vector<std::string>{"data.format: must be one of csv, idx, npy, got \"parquet\""});
}

}  // namespace DDP_TEST_FILE
