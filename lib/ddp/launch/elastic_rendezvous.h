#pragma once
// The rendezvous of an elastic job (--nnodes MIN:MAX): numbered rounds over the same store, each
// with its own members, and the launchers' heartbeats that end a round when a node is lost. See
// Note [Elastic rounds].

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ddp/launch/rendezvous.h"

namespace ddp {

/// Why a round ended other than by a failure; none of these counts against --max-restarts.
struct MembershipChange {
  enum class Kind { kLost, kLeft, kJoined, kStoreLost } kind = Kind::kLost;
  std::string description;  ///< e.g. "node 2 (host-c) was lost: no heartbeat for 5 s"
};

class ElasticRendezvous : public Rendezvous {
 public:
  explicit ElasticRendezvous(const LaunchOptions& options);

  /// Joins round `round` (the first this launcher can, when it has just arrived): waits for MIN
  /// nodes, then up to --rdzv-settle for more (node 0, the store's host, closes the round), and
  /// returns this node's layout in it. nullopt when `interrupted()` while waiting, or when the job
  /// finished before this node was admitted (`finished_before_admission()` then says so). UserError
  /// when fewer than MIN nodes came within --rdzv-timeout.
  std::optional<WorldLayout> join_round(int round, const std::function<bool()>& interrupted);

  /// The round this launcher is in (the one join_round returned).
  int round() const { return round_; }

  /// Once a second: beats for this node, and returns the change that ends the current round, if
  /// any: one already announced, a node whose beats stopped for --node-timeout, or a node waiting
  /// to join while the round has room. Announces what it finds, so every node sees the same.
  std::optional<MembershipChange> check_membership();

  /// Announces that this node leaves the job (SIGTERM: drained by its scheduler).
  void leave(const std::string& why);
  /// After leave(), as this node's workers have stopped: which of the round's members (by node
  /// rank, this one included) said they leave (scancel signals every node at once); nullopt when the
  /// store cannot tell. The store's host keeps it until the other leaving nodes have asked too (up
  /// to --shutdown-grace and --node-timeout), rather than close it under them.
  std::optional<std::vector<bool>> members_leaving();
  int members() const { return static_cast<int>(members_.size()); }

  /// The hosts of this round's newcomers (members of no earlier round), when nodes that ran in an
  /// earlier round are members too; empty otherwise (a first round has no one to admit).
  std::vector<std::string> newcomers() const;
  /// Whether this launcher is one of newcomers().
  bool newcomer() const;
  /// Marks round `round` as ended by refusing its newcomers (Note [Admission]): its failure then
  /// counts against no one's --max-restarts.
  void refuse_newcomers(int round);

  /// Tells launchers still waiting to be admitted that the job is over.
  void job_finished();

  bool finished_before_admission() const { return finished_before_admission_; }
  /// Whether node 0 said the job finished (its workers ended well): its store may close before
  /// this node's workers end, and that is no loss.
  bool node_0_finished() const { return node_0_finished_; }

  /// Where the store is and who hosts it, for the message when it is lost.
  std::string store_description() const;

  /// After the store was lost with node 0: node 1 of the last round hosts a new one at its own
  /// address (--local-addr) and the same port, seeded with what the job needs to go on, and the
  /// others connect to it (Note [Store failover]). `round_failed`: whether round() ended in a
  /// failure, whose report went with the lost store and still counts. Returns the line that says so;
  /// nullopt when this node cannot go on (it was not in a round, or node 1 did not come in time), or
  /// `interrupted` said true while it waited for node 1.
  std::optional<std::string> take_over_store(bool round_failed, const std::function<bool()>& interrupted);

  /// The store's address now: --rdzv-endpoint's host, or the node that took it over.
  const std::string& store_address() const { return options_.master_addr; }

 private:
  struct Member {
    int64_t launcher = 0;  // this launcher's number for the job: names its heartbeat
    int previous_rank = -1;
    std::string host;  // its --local-addr: where it can be reached
    int nproc = 0;
    int64_t pid = 0;   // its launcher's process id, which tells apart nodes that share a host
  };
  /// "host", or "pid N on host" where another member of the round has the same host (two nodes on one
  /// machine), for messages that name a node.
  std::string label(const Member& member) const;
  std::string round_key(int round, const std::string& what) const;
  void publish_node_range();  // Note [One node range]
  void check_node_range();
  /// Node 0: waits for MIN arrivals and the settle time, then publishes the members; false when
  /// `interrupted()` first (the store then goes with this launcher, and node 1 takes it over).
  bool close_round(int round, const std::function<bool()>& interrupted);
  /// Adds one to this launcher's heartbeat counter, unless it did less than `at_most_every` ago.
  void beat(std::chrono::milliseconds at_most_every);
  /// The value of a tagged key, or nullopt when it is absent or does not verify.
  std::optional<std::string> read_verified(const std::string& key);
  void announce(MembershipChange::Kind kind, const std::string& description);
  static std::string kind_word(MembershipChange::Kind kind);

  int max_nodes_;  // --nnodes MIN:MAX's MAX (options_.nnodes becomes the round's count)
  int64_t launcher_ = 0;
  int failures_ = 0;  // failures before round_ (the layout's)
  int round_ = -1;
  int node_rank_in_round_ = -1;
  std::vector<Member> members_;  // of round_, by node rank
  std::map<int64_t, std::pair<int64_t, std::chrono::steady_clock::time_point>> beats_;  // launcher: last count, when it changed
  bool finishing_ = false;  // a member finished this round, or node 0 said the job finished: no join
  bool node_0_finished_ = false;
  std::chrono::steady_clock::time_point last_beat_{};
  bool finished_before_admission_ = false;
};

}  // namespace ddp
