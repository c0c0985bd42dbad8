#pragma once
// Static rendezvous over PyTorch's c10d TCPStore: node 0's launcher hosts the store, every launcher
// registers its node, and all agree on the global rank layout before any worker starts.

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ddp/common/error.h"
#include "ddp/launch/kv_store.h"
#include "ddp/launch/launch_options.h"

namespace ddp {

/// The agreed layout, the same on every node.
struct WorldLayout {
  int world_size = 0;
  int node_rank = 0;    ///< this node's: --node-rank, or as assigned on arrival
  int rank_offset = 0;  ///< global rank of this node's local rank 0
  std::string run_id;
  std::vector<std::string> hosts;  ///< by node rank
  int master_port = 0;     ///< the store's port (TCP store only)
  int node_count = 0;      ///< the nodes of this layout (an elastic round's may be fewer than --nnodes)
  int failures = 0;        ///< elastic: rounds that ended in a failure before this one (the restart count)
  std::string store_path;  ///< the private FileStore directory (single-node trainer runs)
  /// torchrun's role ranks (Note [Role ranks]): the workers of this node's --role on the nodes
  /// before it, and on all nodes; role_world_size 0 is every worker's role (one node).
  int role_rank_offset = 0;
  int role_world_size = 0;

  /// Counts a node of `nproc` workers with `role` (as a registration's role_word carries it) into
  /// the role ranks of a node whose role is `mine`; `before`: the node comes before this one.
  void count_role(const std::string& role, int nproc, bool before, const std::string& mine);
};

// Note [Role ranks]
// torchrun numbers workers within their role as well: ROLE_RANK counts the workers of the same
// --role by node rank, then local rank, and ROLE_WORLD_SIZE is how many there are (its agent's
// _assign_worker_ranks), so that a job of parameter servers on some nodes and trainers on others
// shards by role. Each node's registration carries its role as one word (hex: a role may hold a
// space), and each node counts the others' as it counts their workers.

/// A --role as one word of a registration.
std::string role_word(const std::string& role);

/// A failure reported by some node, seen by all.
struct RemoteFailure {
  int exit_code = 1;
  std::string description;  ///< e.g. "rank 3 on host-b: exit code 7"
  bool restartable = true;  ///< false when a node was interrupted: nobody restarts then
  bool interrupted = false;  ///< a node was stopped by a signal (not restartable): a stop, not a failure
};

/// A restart that cannot form: a node it waits for finished the attempt before (done, with its
/// workers' exit 0 or a failure it does not restart) and leaves. what(): which nodes, and how.
class RestartCannotForm : public UserError {
 public:
  using UserError::UserError;
};

/// Hosts (node 0) or joins the store and runs the node-level protocol on it. See Note [Who hosts the store].
class Rendezvous {
 public:
  /// Binds (node 0) or connects to --master-addr:--master-port, waiting up to --rdzv-timeout;
  /// throws UserError naming the address on a port in use or an unreachable master.
  explicit Rendezvous(const LaunchOptions& options);
  ~Rendezvous();
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  /// The port actually bound (differs from the requested one when that was 0).
  int port() const;

  /// Registers this node (taking a node rank by arrival if asked, after checking node 0's run id)
  /// and waits for all of them; throws UserError on a time-out, a mismatch (run id, --nnodes, the
  /// rendezvous secret) or a store that goes away.
  WorldLayout join();

  /// Announces a failure of `attempt` to every node; the first report wins.
  void report_failure(int attempt, const RemoteFailure& failure);

  /// A failure reported by another node for `attempt`, if any. Throws if the store is gone.
  std::optional<RemoteFailure> remote_failure(int attempt);

  /// Waits until every node is ready to start `attempt` (after a restart): true then, false as soon
  /// as `interrupted()` is (a signal to the launcher); RestartCannotForm as soon as a node it waits
  /// for is seen to have finished the attempt before; UserError on a time-out.
  bool barrier_before(int attempt, const std::function<bool()>& interrupted);

  /// Marks this node finished with `attempt`, ending with `exit_status`; node 0 waits (bounded) for the rest so its store
  /// outlives every client, and stops waiting as soon as `interrupted()` is, or for a node whose
  /// launcher has gone silent (Note [Silent nodes]).
  void finish(int attempt, const std::function<bool()>& interrupted, int exit_status = 0);

  /// Says this node's launcher lives, at most once a second (Note [Silent nodes]); a store that
  /// does not answer is left for the caller's next call to name.
  void beat_alive();

 protected:
  /// Waits (up to --rdzv-timeout) until something accepts at the store's endpoint, saying so when it
  /// is not at once; UserError naming the endpoint when nothing does.
  void wait_for_store_host() const;
  /// Hosts or connects to the store; UserError naming the endpoint, except that a lost race to bind
  /// (by arrival) is rethrown as is.
  std::unique_ptr<KvStore> open_store(bool host);
  /// `value` with its tag under the job's secret (Note [Control values]); unchanged without one.
  std::string tagged(const std::string& key, const std::string& value) const;
  /// The value of a stored control value that verifies; nullopt (said once per key unless `quiet`) if it does not.
  std::optional<std::string> verified(const std::string& key, const std::string& stored, bool quiet = false) const;
  /// Whether `stored` (another node's value under `key`) was written under this node's secret: tagged
  /// and verifying where this node has one, untagged where it has none (Note [Secret check at join]).
  bool same_secret(const std::string& key, const std::string& stored) const;
  /// Where node `node_rank` says it finished attempt (elastic: round) `attempt`, with its exit status.
  static std::string done_key(int attempt, int node_rank);
  /// How long a launcher's alive count may stand still before it is taken for dead (Note [Silent nodes]).
  std::chrono::steady_clock::duration silence_limit() const;
  /// UserError: `nodes` of the rendezvous have another secret than this node's.
  [[noreturn]] void refuse_other_secret(const std::string& nodes) const;
  /// join() without the translation of a lost store into a UserError.
  WorldLayout join_store();
  /// Node 0's run id, waiting for node 0 to publish it; UserError on a time-out.
  std::string wait_for_run_id();
  /// Reads every node's registration into `layout`; UserError on a mismatch (Note [Secret check at join]).
  void check_registrations(const std::vector<std::string>& keys, WorldLayout& layout);

  LaunchOptions options_;  // node_rank: as agreed once joined
  bool hosts_store_ = false;
  std::string run_id_;  // node 0's, once joined: part of every tag
  mutable std::set<std::string> ignored_;  // keys already reported as unverified
  std::chrono::milliseconds timeout_;
  /// Elastic: --node-timeout, how long the store host may leave a call unanswered (Note [A frozen
  /// store host]); 0 otherwise. Fixed at the start: options_.nnodes later counts a round's nodes.
  std::chrono::milliseconds answer_within_{0};
  std::unique_ptr<KvStore> store_;
  std::chrono::steady_clock::time_point last_alive_beat_{};
  std::set<int> silent_nodes_;  // found silent before a restart (Note [Silent nodes])
};

/// A directory only this user can enter, removed with everything in it when destroyed. Single-node
/// ddp-train runs meet through c10d's FileStore in it, so nothing of the run listens on the network.
/// Its owner holds a lock in it, so that one left by a killed launcher is swept by the next
/// (Note [Store directory owner]).
class PrivateStoreDir {
 public:
  PrivateStoreDir();  ///< under $TMPDIR (default /tmp), mode 0700, after sweeping orphaned ones there
  ~PrivateStoreDir();
  PrivateStoreDir(const PrivateStoreDir&) = delete;
  PrivateStoreDir& operator=(const PrivateStoreDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int lock_fd_ = -1;  // flocked while this launcher lives
};

/// Generates a short random run id.
std::string generate_run_id();

}  // namespace ddp
