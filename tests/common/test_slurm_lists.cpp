// Slurm's compressed host and count lists, against known expansions and against Slurm's own
// `scontrol show hostnames` (Debian's slurm-client, with a minimal slurm.conf of the test's).
#include <catch2/catch.hpp>

#include "ddp/common/error.h"
#include "ddp/common/text.h"
#include "ddp/common/slurm_lists.h"
#include "support/subprocess.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp::test;
using Catch::Contains;
using Strings = std::vector<std::string>;

namespace {

const Strings kLists = {"node[01-04,07]", "a[1-2],b3",        "rack1-n[001-003]", "n1",
                        "x[1-2]y[3-4]",   "gpu[9-11]",        "c[0-2],d[08-10]",  "host-[1,3,5-6]",
                        "big[098-101]",   "a,b,c",            "n[1-3],m[7-8]",  "pfx[0000-0002]"};

}  // namespace

TEST_CASE("Slurm host lists expand as Slurm documents them", "[launch][slurm]") {
  CHECK(ddp::expand_hostlist("node[01-04,07]") == Strings{"node01", "node02", "node03", "node04", "node07"});
  CHECK(ddp::expand_hostlist("a[1-2],b3") == Strings{"a1", "a2", "b3"});
  CHECK(ddp::expand_hostlist("rack1-n[001-003]") == Strings{"rack1-n001", "rack1-n002", "rack1-n003"});
  CHECK(ddp::expand_hostlist("x[1-2]y[3-4]") == Strings{"x1y3", "x1y4", "x2y3", "x2y4"});
  CHECK(ddp::expand_hostlist("gpu[9-11]") == Strings{"gpu9", "gpu10", "gpu11"});
  CHECK(ddp::expand_hostlist("big[098-101]") == Strings{"big098", "big099", "big100", "big101"});
  CHECK(ddp::expand_hostlist("a,,b") == Strings{"a", "b"});  // as scontrol reads it
  for (const char* bad : {"n[1-3", "n1-3]", "n[3-1]", "n[a-b]", "n[]", "", ",", "a[1-2]b", "n[0-99999999]",
                          "a[0-4611686018427387903]b[1-4]", "n[0-9223372036854775807]"})
    CHECK_THROWS_AS(ddp::expand_hostlist(bad), ddp::UserError);
  CHECK_THROWS_WITH(ddp::expand_hostlist("n[3-1]"), "Slurm list \"n[3-1]\": the range 3-1 runs backwards");
}

TEST_CASE("Slurm count lists expand their repeats", "[launch][slurm]") {
  CHECK(ddp::expand_counts("2(x3),1") == std::vector<int>{2, 2, 2, 1});
  CHECK(ddp::expand_counts("4") == std::vector<int>{4});
  CHECK(ddp::expand_counts("1,2(x2)") == std::vector<int>{1, 2, 2});
  for (const char* bad : {"", "2(x0)", "2(3)", "x", "2(x3", "-1"}) CHECK_THROWS_AS(ddp::expand_counts(bad), ddp::UserError);
}

TEST_CASE("the host list parser agrees with scontrol show hostnames", "[launch][slurm]") {
  if (run_shell("command -v scontrol").exit_code != 0) {
    WARN("skipped: no scontrol here (Debian's slurm-client; scripts/setup.sh installs it)");
    return;
  }
  // scontrol reads a slurm.conf before anything else, even to expand a list.
  TempDir dir;
  write_file(dir.file("slurm.conf"), "ClusterName=t\nSlurmctldHost=localhost\nNodeName=n1 CPUs=1\nPartitionName=p Nodes=n1\n");
  for (const auto& list : kLists) {
    auto r = run_shell("SLURM_CONF=" + dir.file("slurm.conf") + " scontrol show hostnames '" + list + "'");
    INFO(list << "\n" << r.err);
    REQUIRE(r.exit_code == 0);
    Strings expected = ddp::split(r.out, '\n');
    if (!expected.empty() && expected.back().empty()) expected.pop_back();
    CHECK(ddp::expand_hostlist(list) == expected);
  }
}

}  // namespace DDP_TEST_FILE
