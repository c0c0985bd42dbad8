// The worker's side of the launcher contract: ddp-train reads every variable the contract says it reads.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "ddp/comm/dist_env.h"
#include "ddp/common/error.h"
#include "ddp/common/worker_contract.h"

using namespace ddp;

namespace {

// Sets a variable for one scope.
class ScopedVariable {
 public:
  ScopedVariable(const char* name, const std::string& value) : name_(name) { setenv(name, value.c_str(), 1); }
  ~ScopedVariable() { unsetenv(name_); }

 private:
  const char* name_;
};

}  // namespace

TEST_CASE("dist_env_from_environment reads the contract's variables", "[comm][contract]") {
  ScopedVariable rank(env::kRank, "3"), world(env::kWorldSize, "4"), local(env::kLocalRank, "1"),
      local_world(env::kLocalWorldSize, "2"), addr(env::kMasterAddr, "10.1.2.3"), port(env::kMasterPort, "1234"),
      restart(env::kRestartCount, "5"), agent(env::kUseAgentStore, "True"), id(env::kRunId, "job7"),
      store(env::kStorePath, "/tmp/s");
  DistEnv read = dist_env_from_environment();
  CHECK(read.rank == 3);
  CHECK(read.world_size == 4);
  CHECK(read.local_rank == 1);
  CHECK(read.local_world_size == 2);
  CHECK(read.master_addr == "10.1.2.3");
  CHECK(read.master_port == 1234);
  CHECK(read.restart_count == 5);
  CHECK(read.launcher_store);
  CHECK(read.run_id == "job7");
  CHECK(read.store_path == "/tmp/s");
}

TEST_CASE("without a launcher: one process, the default port, torch elastic's restart count", "[comm][contract]") {
  DistEnv alone = dist_env_from_environment();
  CHECK(alone.rank == 0);
  CHECK(alone.world_size == 1);
  CHECK(alone.master_port == kDefaultMasterPort);
  ScopedVariable elastic(env::kElasticRestartCount, "2");
  CHECK(dist_env_from_environment().restart_count == 2);
  ScopedVariable bad(env::kRank, "x");
  CHECK_THROWS_WITH(dist_env_from_environment(), Catch::Contains("RANK: expected a non-negative integer, got 'x'"));
}
