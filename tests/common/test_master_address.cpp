// resolve_master_address with fake lookups: a name that resolves is kept, one only Slurm knows
// becomes its NodeAddr, one nobody knows fails at once naming the fix.
#include <catch2/catch.hpp>

#include <netdb.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "ddp/common/error.h"
#include "ddp/common/master_address.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using Catch::Contains;

namespace {

// Resolves exactly `known`; Slurm knows `slurm` (name → NodeAddr).
ddp::AddressLookup fake(std::vector<std::string> known, std::map<std::string, std::string> slurm) {
  ddp::AddressLookup lookup;
  lookup.resolve = [known](const std::string& name) {
    return std::find(known.begin(), known.end(), name) != known.end() ? 0 : EAI_NONAME;
  };
  lookup.slurm_node_addr = [slurm](const std::string& name) -> std::optional<std::string> {
    auto found = slurm.find(name);
    if (found == slurm.end()) return std::nullopt;
    return found->second;
  };
  return lookup;
}

}  // namespace

TEST_CASE("a master name that resolves is used as it is, without asking Slurm", "[common][master_address]") {
  auto lookup = fake({"n1"}, {{"n1", "10.0.0.1"}});
  auto master = ddp::resolve_master_address("n1", "FIX", lookup);
  CHECK(master.address == "n1");
  CHECK(master.note.empty());
}

TEST_CASE("a node name only Slurm knows becomes its NodeAddr, and the note says so", "[common][master_address]") {
  auto lookup = fake({"10.0.0.7"}, {{"sn1", "10.0.0.7"}});
  auto master = ddp::resolve_master_address("sn1", "FIX", lookup);
  CHECK(master.address == "10.0.0.7");
  CHECK_THAT(master.note, Contains("the master sn1 does not resolve here") &&
                              Contains("Slurm's NodeAddr for it is 10.0.0.7 (scontrol show node sn1)"));
}

TEST_CASE("a master nobody knows, or whose NodeAddr does not resolve either, fails naming the fix",
          "[common][master_address]") {
  CHECK_THROWS_WITH(ddp::resolve_master_address("sn9", "set MASTER_ADDR", fake({}, {})),
                    Contains("the master address sn9 does not resolve (") && Contains("): set MASTER_ADDR"));
  CHECK_THROWS_AS(ddp::resolve_master_address("sn1", "FIX", fake({}, {{"sn1", "sn1-ib"}})), ddp::UserError);
}

}  // namespace DDP_TEST_FILE
