// The generic schema alone, bound to a struct of its own: parse, override, validate, dump, document.
#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>
#include <vector>

#include "ddp/config/config_schema.h"

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
  CHECK_THROWS_AS(schema.add("s.count", &small.count, ""), std::logic_error);
  CHECK_THROWS_AS(schema.add("s.flag", &flag, "").min(0), std::logic_error);
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
