// The launcher↔worker contract (ddp/common/worker_contract.h): every variable the launcher sets is
// in it, and every variable in it is documented in docs/launcher.md. That the trainer reads its
// share is tested in tests/common/test_worker_identity.cpp.
#include <catch2/catch.hpp>

#include <set>
#include <string>

#include "ddp/common/worker_contract.h"
#include "ddp/common/worker_identity.h"
#include "ddp/launch/output_relay.h"
#include "support/subprocess.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp;

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
