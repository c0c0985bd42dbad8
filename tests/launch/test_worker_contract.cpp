// The launcher↔worker contract (ddp/common/worker_contract.h): every variable the launcher sets is
// in it, and every variable in it is documented in docs/launcher.md. That the trainer reads its
// share is tested in tests/common/test_worker_identity.cpp.
#include <catch2/catch.hpp>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "ddp/common/worker_contract.h"
#include "ddp/common/worker_identity.h"
#include "ddp/launch/output_relay.h"
#include "ddp/launch/recorded_error.h"
#include "ddp/launch/worker_env.h"
#include "support/subprocess.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp;
using namespace ddp::test;

TEST_CASE("every variable the launcher sets is in the contract", "[launch][contract]") {
  std::set<std::string> contract;
  for (const auto& variable : kWorkerVariables) contract.insert(variable.name);
  WorkerIdentity id;
  id.store_path = "/tmp/store";  // the single-node case sets one more
  id.launcher_store = true;      // as the supervisor's workers always have it
  auto variables = worker_variables(id);
  REQUIRE(variables.size() >= 15);
  for (const auto& [name, value] : variables) {
    INFO(name);
    CHECK(contract.count(name) == 1);
  }
  // The five the supervisor adds itself.
  for (const char* role : {env::kRoleName, env::kRoleRank, env::kRoleWorldSize}) CHECK(contract.count(role) == 1);
  CHECK(contract.count(env::kHeartbeatFd) == 1);
  CHECK(contract.count(env::kOmpNumThreads) == 1);
  CHECK(contract.count(env::kElasticErrorFile) == 1);
  for (const char* version : {"1.13.0", "2.2.1", ""})
    for (const auto& [name, value] : torchrun_defaults(version, [](const char*) { return nullptr; })) {
      INFO(name);
      CHECK(contract.count(name) == 1);
    }
}

TEST_CASE("NCCL's asynchronous error handling under the name the worker's torch reads, unless set",
          "[launch][contract]") {
  auto unset = [](const char*) -> const char* { return nullptr; };
  using Variables = std::map<std::string, std::string>;
  CHECK(torchrun_defaults("1.13.0", unset) == Variables{{"NCCL_ASYNC_ERROR_HANDLING", "1"}});
  CHECK(torchrun_defaults("2.1.2+cu121", unset) == Variables{{"NCCL_ASYNC_ERROR_HANDLING", "1"}});
  CHECK(torchrun_defaults("2.2.0", unset) == Variables{{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"}});
  CHECK(torchrun_defaults("", unset) == Variables{{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"}});
  CHECK(torchrun_defaults("unknown", unset) == Variables{{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"}});
  for (const std::string set : {"NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_ASYNC_ERROR_HANDLING"})
    CHECK(torchrun_defaults("1.13.0", [&set](const char* name) -> const char* {
            return name == set ? "0" : nullptr;
          }).empty());
}

TEST_CASE("a failed rank's @record error file: its message's first line, nothing from a broken one",
          "[launch][contract]") {
  TempDir dir;
  auto written = [&dir](const std::string& text) {
    write_file(dir.file("error.json"), text);
    return recorded_error(dir.file("error.json"));
  };
  CHECK(written(R"({"message": {"message": "RuntimeError: boom\nmore", "extraInfo": {"timestamp": "1"}}})") ==
        std::optional<std::string>("RuntimeError: boom"));
  CHECK(written(R"({"message": "ValueError: plain"})") == std::optional<std::string>("ValueError: plain"));
  CHECK_FALSE(written(R"({"message": {"messa)"));  // half-written
  CHECK_FALSE(written(R"({"other": 1})"));
  CHECK_FALSE(written(R"({"message": {"message": ""}})"));
  CHECK_FALSE(recorded_error(dir.file("none.json")));
}

TEST_CASE("every variable of the contract is documented in docs/launcher.md", "[launch][contract][docs]") {
  std::string guide = test::read_file(std::string(DDP_SOURCE_DIR) + "/docs/launcher.md");
  REQUIRE(!guide.empty());
  for (const auto& variable : kWorkerVariables) {
    INFO(variable.name);
    CHECK(guide.find("`" + std::string(variable.name)) != std::string::npos);
  }
}

TEST_CASE("the rank a worker's stderr line reports is read from ddp-train's own words only", "[launch][contract]") {
  CHECK(rank_reported("ddp-train: rank 12: failed: x") == 12);
  CHECK(rank_reported("ddp-train: rank 0: error: train.epochs: must be >= 1") == 0);
  CHECK_FALSE(rank_reported("ddp-train: rank x: failed"));
  CHECK_FALSE(rank_reported("ddp-train: rank 3"));
  CHECK_FALSE(rank_reported("[rank 1] ddp-train: rank 3: failed"));
  CHECK_FALSE(rank_reported("ddp-train: rank 99999999999999: failed"));
}

TEST_CASE("the rank whose failure a worker's report relays", "[launch][contract]") {
  CHECK(rank_relayed("ddp-train: rank 1: I/O error: rank 0: /r/step_4.pt: No space left on device") == 0);
  CHECK(rank_relayed("ddp-train: rank 0: error: rank 12: x") == 12);
  CHECK_FALSE(rank_relayed("ddp-train: rank 0: I/O error: /r/step_4.pt: No space left on device"));  // its own
  CHECK_FALSE(rank_relayed("ddp-train: rank 1: failed: ranked 0: x"));
  CHECK_FALSE(rank_relayed("ddp-train: rank 1: failed: rank 0 left"));
  CHECK_FALSE(rank_relayed("[rank 1] ddp-train: rank 3: failed: rank 0: x"));  // not ddp-train's own words
}

}  // namespace DDP_TEST_FILE
