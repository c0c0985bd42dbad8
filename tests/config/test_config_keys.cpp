// A saved config as flat keys (config_keys.h): what a resume and a report compare.
#include <catch2/catch.hpp>

#include "ddp/config/config_keys.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

TEST_CASE("a saved config flattens to section.key with flow values, and what is no map of sections to no keys",
          "[config]") {
  auto keys = ddp::config_keys("# ddprun\nrun:\n  seed: 3\nmodel:\n  hidden: [256, 128]\n  name: mlp\noptim: {lr: 0.01}\n");
  CHECK(keys == std::map<std::string, std::string>{
                    {"run.seed", "3"}, {"model.hidden", "[256, 128]"}, {"model.name", "mlp"}, {"optim.lr", "0.01"}});
  CHECK(ddp::config_keys("").empty());
  CHECK(ddp::config_keys("- a\n- b\n").empty());        // a list
  CHECK(ddp::config_keys("run: [unclosed\n").empty());  // not YAML
  CHECK(ddp::config_keys("top: 1\nrun:\n  seed: 1\n") == std::map<std::string, std::string>{{"run.seed", "1"}});
  // Keys that are no names are left out (as() threw "bad conversion": ddp-report and a re-run exited 1).
  CHECK(ddp::config_keys("run:\n  ? [a, b]\n  : 1\n  seed: 2\n? [c]\n: {x: 1}\n") ==
        std::map<std::string, std::string>{{"run.seed", "2"}});
}

}  // namespace DDP_TEST_FILE
