// The elastic rendezvous in-process: two launchers' rounds over a real store on loopback, and a
// joiner seen between the two writes of its arrival (a race clean-clone CI once lost).
#include <catch2/catch.hpp>

#include <chrono>
#include <future>

#include "ddp/launch/elastic_rendezvous.h"
#include "ddp/launch/kv_store.h"
#include "support/subprocess.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp::test;
using namespace std::chrono_literals;
using Catch::Contains;

namespace {

// Node `name` of a 2:3 job whose store is at 127.0.0.1:`port`; the first constructed hosts it.
ddp::LaunchOptions elastic_node(int port, const std::string& name) {
  ddp::LaunchOptions o;
  o.nnodes = 3;
  o.min_nodes = 2;
  o.node_rank_by_arrival = true;
  o.master_addr = "127.0.0.1";
  o.master_port = port;
  o.rdzv_timeout_s = 20;
  o.rdzv_settle_s = 0.2;
  o.node_timeout_s = 10;
  o.local_addr = name;
  return o;
}

// Round 0 of `a` (constructed first: the host, node 0) and `b`, joined at once.
std::pair<ddp::WorldLayout, ddp::WorldLayout> join_round_0(ddp::ElasticRendezvous& a, ddp::ElasticRendezvous& b) {
  auto never = [] { return false; };
  auto joined_b = std::async(std::launch::async, [&] { return b.join_round(0, never); });
  auto layout_a = a.join_round(0, never);
  auto layout_b = joined_b.get();
  REQUIRE(layout_a);
  REQUIRE(layout_b);
  return {*layout_a, *layout_b};
}

}  // namespace

TEST_CASE("elastic: a joiner that has counted itself in but not yet written its arrival is named once it has",
          "[launch][elastic]") {
  int port = free_port();
  ddp::ElasticRendezvous a(elastic_node(port, "node-a"));
  ddp::ElasticRendezvous b(elastic_node(port, "node-b"));
  join_round_0(a, b);
  CHECK(a.round() == 0);
  CHECK_FALSE(a.check_membership());

  // A third launcher's first write: it takes arrival number 0 of round 1 ...
  auto joiner = ddp::open_tcp_store({"127.0.0.1", port, false, 10s});
  joiner->add("ddprun/elastic/round_1/arrivals", 1);
  CHECK_FALSE(a.check_membership());  // ... and is not announced while its arrival is unwritten
  CHECK_FALSE(b.check_membership());

  // Its second: launcher number, previous rank, host, workers, pid, role.
  joiner->set("ddprun/elastic/round_1/arrival/0", "3 -1 node-c 1 4242 " + ddp::role_word("default"));
  auto change = a.check_membership();
  REQUIRE(change);
  CHECK(change->kind == ddp::MembershipChange::Kind::kJoined);
  CHECK(change->description == "a node (node-c) asks to join; room for 1 more (--nnodes 2:3)");
  auto seen_by_b = b.check_membership();  // the first announcement stands for every node
  REQUIRE(seen_by_b);
  CHECK(seen_by_b->description == change->description);
}

TEST_CASE("elastic: ROLE_RANK counts the workers of a node's --role on the nodes before it, as torchrun's",
          "[launch][elastic]") {
  // Node a (node 0, the host) and b, with 2 and 1 workers: of one role, then of two.
  for (const bool same : {true, false}) {
    INFO("same role: " << same);
    int port = free_port();
    auto options_a = elastic_node(port, "node-a"), options_b = elastic_node(port, "node-b");
    options_a.nproc_per_node = 2;
    options_a.role = "trainer";
    options_b.nproc_per_node = 1;
    options_b.role = same ? "trainer" : "parameter server";
    ddp::ElasticRendezvous a(options_a);
    ddp::ElasticRendezvous b(options_b);
    const auto [layout_a, layout_b] = join_round_0(a, b);
    REQUIRE(layout_a.node_rank == 0);
    CHECK(layout_a.role_rank_offset == 0);
    CHECK(layout_a.role_world_size == (same ? 3 : 2));
    CHECK(layout_b.role_rank_offset == (same ? 2 : 0));
    CHECK(layout_b.role_world_size == (same ? 3 : 1));
  }
}

}  // namespace DDP_TEST_FILE
