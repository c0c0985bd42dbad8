#include "ddp/launch/elastic_rendezvous.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include "ddp/common/error.h"
#include "ddp/common/master_address.h"
#include "ddp/common/port_probe.h"
#include "ddp/common/text.h"
#include "ddp/launch/output_relay.h"
#include "ddp/launch/store_probe.h"

namespace ddp {
namespace {

using Clock = std::chrono::steady_clock;

const std::string kElastic = "ddprun/elastic/";
constexpr auto kPoll = std::chrono::milliseconds(100);
constexpr auto kBeatEvery = std::chrono::milliseconds(500);
const std::string kAbandoned = "abandoned: ";

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// "5", "2.5": seconds as a person writes them.
std::string seconds_text(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", s);
  std::string out = text;
  return out.ends_with(".0") ? out.substr(0, out.size() - 2) : out;
}

}  // namespace

// Note [Elastic rounds]: with --nnodes MIN:MAX, launchers meet in numbered rounds on node 0's store
// (the launcher that hosts it is node 0 of every round). A launcher arrives in the open round by
// taking a number from its arrival counter; node 0 closes the round once MIN have arrived and
// --rdzv-settle has passed without another (at once with MAX), and publishes the members: itself,
// then the nodes of the previous round in their old order, then newcomers by arrival, so node
// ranks are contiguous and rank 0 stays where the checkpoints are. A launcher that is not among
// them (the round was full, or closed as it came) waits in the next one. During a round every
// launcher beats a counter of its own in the store and reads the others'; the first to see one
// that has not moved for --node-timeout, a node waiting to join while the round has room, or a
// node that says it leaves, announces it under the round's "end" key (the first announcement wins,
// so every node gives the same cause); then all stop their workers and arrive in the next round.
// A failure is reported as before under the round's failure key, and only those rounds count
// against --max-restarts: a newcomer counts them in the store, so a node that keeps rejoining
// starts no count of its own.

ElasticRendezvous::ElasticRendezvous(const LaunchOptions& options)
    : Rendezvous(options), max_nodes_(options.nnodes) {}

// Note [One node range]: each launcher decides from its own --nnodes MIN:MAX when to close a round
// (node 0) and when a joiner has room (every node), so launchers of other ranges would tear down
// every round for a node node 0 never admits. Node 0 publishes its range, under its secret, before
// it opens round 0; a launcher of another range, or another secret, is refused before it arrives,
// and so is never counted toward MIN.
void ElasticRendezvous::publish_node_range() {
  const std::string key = kElastic + "nnodes";
  store_->set(key, tagged(key, std::to_string(options_.min_nodes) + ":" + std::to_string(max_nodes_)));
}

void ElasticRendezvous::check_node_range() {
  const std::string key = kElastic + "nnodes";
  store_->wait({key}, timeout_);
  const std::string stored = store_->get(key);
  if (!same_secret(key, stored)) refuse_other_secret("0 (" + options_.master_addr + ", which hosts the store)");
  const std::string mine = std::to_string(options_.min_nodes) + ":" + std::to_string(max_nodes_);
  const std::string theirs = verified(key, stored).value_or(stored);
  if (theirs != mine)
    throw UserError("node 0 of the elastic job at " + options_.master_addr + ":" + std::to_string(port()) +
                    " was started with --nnodes " + printable(theirs, 40) + " but this node with --nnodes " + mine +
                    ": give every node the same --nnodes");
}

std::string ElasticRendezvous::round_key(int round, const std::string& what) const {
  return kElastic + "round_" + std::to_string(round) + "/" + what;
}

std::string ElasticRendezvous::store_description() const {
  return options_.master_addr + ":" + std::to_string(port()) + ", hosted by node 0's launcher" +
         (members_.empty() ? "" : " on " + members_.front().host);
}

void ElasticRendezvous::beat(std::chrono::milliseconds at_most_every) {
  if (Clock::now() - last_beat_ < at_most_every) return;
  store_->add(kElastic + "alive/" + std::to_string(launcher_), 1);
  last_beat_ = Clock::now();
}

std::optional<std::string> ElasticRendezvous::read_verified(const std::string& key) {
  if (!store_->check(key)) return std::nullopt;
  return verified(key, store_->get(key));
}

std::optional<WorldLayout> ElasticRendezvous::join_round(int round, const std::function<bool()>& interrupted) {
  const auto& o = options_;
  if (launcher_ == 0) {
    // The job's run id first, as in join(): every value is tagged with it.
    if (hosts_store_) {
      run_id_ = o.run_id.empty() ? generate_run_id() : o.run_id;
      store_->set("ddprun/run_id", run_id_);
      publish_node_range();
      store_->set(kElastic + "open", "0");
    } else {
      run_id_ = wait_for_run_id();
      check_run_id(run_id_);
      if (!o.run_id.empty() && o.run_id != run_id_)
        throw UserError("run id " + o.run_id + " (--run-id/--rdzv-id) differs from " + run_id_ +
                        ", the run id of the elastic job at " + o.master_addr + ":" + std::to_string(o.master_port) +
                        ": give each job its own endpoint, and every node of a job the same id");
      store_->wait({kElastic + "open"}, timeout_);
      check_node_range();
    }
    launcher_ = store_->add(kElastic + "launchers", 1);
  }
  int previous_rank = node_rank_in_round_;
  bool said_waiting = false;
  for (;;) {
    int open = static_cast<int>(parse_int(store_->get(kElastic + "open")).value_or(0));
    if (round_ < 0 && open > 0 && !said_waiting) {
      std::fprintf(stderr, "ddprun: joining a running elastic job: admitted when its round %d forms\n", open);
      said_waiting = true;
    }
    round = std::max(round, open);
    int64_t index = store_->add(round_key(round, "arrivals"), 1) - 1;
    std::string key = round_key(round, "arrival/" + std::to_string(index));
    store_->set(key, tagged(key, std::to_string(launcher_) + " " + std::to_string(previous_rank) + " " + o.local_addr +
                                     " " + std::to_string(o.nproc_per_node) + " " + std::to_string(getpid()) + " " +
                                     role_word(o.role)));
    if (hosts_store_ && !close_round(round, interrupted)) return std::nullopt;
    // Wait for node 0 to publish the members, beating meanwhile.
    std::string members_key = round_key(round, "members");
    while (!store_->check(members_key)) {
      if (interrupted()) return std::nullopt;
      if (store_->check(kElastic + "finished")) {
        finished_before_admission_ = true;
        return std::nullopt;
      }
      beat(/*at_most_every=*/kBeatEvery);
      std::this_thread::sleep_for(kPoll);
    }
    auto published = verified(members_key, store_->get(members_key));
    if (!published) throw UserError("the members of rendezvous round " + std::to_string(round) + " do not verify");
    if (published->rfind(kAbandoned, 0) == 0) throw UserError(published->substr(kAbandoned.size()));
    std::vector<int64_t> chosen;
    for (const auto& word : split(*published, ' '))
      if (!word.empty()) chosen.push_back(parse_int(word).value_or(-1));
    if (std::find(chosen.begin(), chosen.end(), index) == chosen.end()) {
      if (!said_waiting)
        std::fprintf(stderr, "ddprun: rendezvous round %d closed with %zu node(s) (--nnodes %d:%d); waiting to join "
                             "at the next round\n", round, chosen.size(), o.min_nodes, max_nodes_);
      said_waiting = true;
      ++round;
      continue;
    }
    // This node's layout: the members in their published order.
    WorldLayout layout;
    layout.run_id = run_id_;
    layout.node_rank = -1;  // until this node is found among the members
    members_.clear();
    for (std::size_t i = 0; i < chosen.size(); ++i) {
      std::string member_key = round_key(round, "arrival/" + std::to_string(chosen[i]));
      auto value = read_verified(member_key);
      auto fields = value ? split(*value, ' ') : std::vector<std::string>{};
      if (fields.size() != 6)
        throw UserError("rendezvous round " + std::to_string(round) + ": a member's registration does not verify");
      Member m{parse_int(fields[0]).value_or(0), static_cast<int>(parse_int(fields[1]).value_or(-1)), printable(fields[2]),
               static_cast<int>(parse_int(fields[3]).value_or(0)), parse_int(fields[4]).value_or(0)};
      if (chosen[i] == index) layout.node_rank = static_cast<int>(i);
      if (layout.node_rank < 0) layout.rank_offset += m.nproc;  // the nodes before this one
      layout.world_size += m.nproc;
      layout.count_role(fields[5], m.nproc, layout.node_rank < 0, o.role);
      members_.push_back(m);
    }
    for (const auto& m : members_) layout.hosts.push_back(label(m));
    layout.node_count = static_cast<int>(members_.size());
    // Failures before a store failover were counted by the store that was lost (Note [Store failover]).
    int counted_from = 0;
    if (auto before = read_verified(kElastic + "failures_before")) {
      auto fields = split(*before, ' ');
      if (fields.size() == 2) {
        counted_from = static_cast<int>(parse_int(fields[0]).value_or(0));
        layout.failures = static_cast<int>(parse_int(fields[1]).value_or(0));
      }
    }
    for (int r = counted_from; r < round; ++r)
      layout.failures += remote_failure(r).has_value() && !store_->check(round_key(r, "refused"));
    failures_ = layout.failures;
    round_ = round;
    node_rank_in_round_ = layout.node_rank;
    options_.node_rank = layout.node_rank;
    options_.nnodes = layout.node_count;  // what report_failure, finish and the checks count
    beats_.clear();
    finishing_ = false;
    for (const auto& m : members_)
      if (m.launcher != launcher_) beats_[m.launcher] = {-1, Clock::now()};
    return layout;
  }
}

// Note [Admission]: a newcomer's workers meet the others only once the round that admits it has
// started, and what cannot go together shows there: another config (the trainer checks every rank's
// against rank 0's), or a --nproc-per-node that makes a world size the global batch cannot split
// over. Every worker then stops on a usage error (exit 2), which no restart cures; without this, the
// whole job would end. So a round with newcomers and nodes that ran before, which ends in a usage
// error, is taken to have failed because of its newcomers: they are refused (each says so and exits
// 2), and the others meet again without them, the round counting as a membership change. Should the
// fault lie elsewhere, the next round (without newcomers) fails alike and ends the job as before.
std::vector<std::string> ElasticRendezvous::newcomers() const {
  std::vector<std::string> hosts;
  bool veterans = false;
  for (const auto& m : members_) {
    if (m.previous_rank < 0) hosts.push_back(m.host);
    veterans = veterans || m.previous_rank >= 0;
  }
  return veterans ? hosts : std::vector<std::string>{};
}

std::string ElasticRendezvous::label(const Member& member) const {
  const auto same_host = std::count_if(members_.begin(), members_.end(),
                                       [&](const Member& m) { return m.host == member.host; });
  return same_host > 1 ? "pid " + std::to_string(member.pid) + " on " + member.host : member.host;
}

bool ElasticRendezvous::newcomer() const {
  for (const auto& m : members_)
    if (m.launcher == launcher_) return m.previous_rank < 0 && !newcomers().empty();
  return false;
}

void ElasticRendezvous::refuse_newcomers(int round) { store_->set(round_key(round, "refused"), "1"); }

bool ElasticRendezvous::close_round(int round, const std::function<bool()>& interrupted) {
  const auto& o = options_;
  const auto opened = Clock::now();
  auto arrivals = [&] { return store_->add(round_key(round, "arrivals"), 0); };
  // After a change, the previous members but the one that went come back once their workers stop.
  int64_t expected = std::max<int64_t>(o.min_nodes, static_cast<int64_t>(members_.size()) - 1);
  const double stragglers_s = o.shutdown_grace_s + o.rdzv_settle_s + 2;
  int64_t seen = arrivals();
  auto quiet_since = Clock::now();
  for (;;) {
    int64_t now_in = arrivals();
    if (now_in != seen) {
      seen = now_in;
      quiet_since = Clock::now();
    }
    if (seen >= max_nodes_) break;
    bool settled = seen >= o.min_nodes && seconds_since(quiet_since) >= o.rdzv_settle_s &&
                   (seen >= expected || seconds_since(opened) >= stragglers_s);
    if (settled) break;
    if (seen < o.min_nodes && seconds_since(opened) > o.rdzv_timeout_s) {
      std::string message = "rendezvous round " + std::to_string(round) + " had " + std::to_string(seen) +
                             " node(s) after --rdzv-timeout " + seconds_text(o.rdzv_timeout_s) + " s, and --nnodes " +
                             std::to_string(o.min_nodes) + ":" + std::to_string(max_nodes_) + " needs at least " +
                             std::to_string(o.min_nodes);
      std::string key = round_key(round, "members");
      store_->set(key, tagged(key, kAbandoned + message));
      std::this_thread::sleep_for(std::chrono::seconds(1));  // the others read it before the store closes
      throw UserError(message);
    }
    if (interrupted()) return false;
    beat(/*at_most_every=*/kBeatEvery);
    std::this_thread::sleep_for(kPoll);
  }
  // Who arrived, and in which order they become node ranks.
  struct Arrival {
    int64_t index;
    int previous_rank;
    bool is_me;
  };
  std::vector<Arrival> arrived;
  std::vector<std::string> keys;
  for (int64_t i = 0; i < seen; ++i) keys.push_back(round_key(round, "arrival/" + std::to_string(i)));
  store_->wait(keys, timeout_);
  for (int64_t i = 0; i < seen; ++i) {
    auto value = read_verified(keys[i]);
    auto fields = value ? split(*value, ' ') : std::vector<std::string>{};
    if (fields.size() != 6) continue;  // written from outside the job: not a member
    arrived.push_back({i, static_cast<int>(parse_int(fields[1]).value_or(-1)),
                       parse_int(fields[0]).value_or(0) == launcher_});
  }
  std::stable_sort(arrived.begin(), arrived.end(), [](const Arrival& a, const Arrival& b) {
    if (a.is_me != b.is_me) return a.is_me;
    bool a_old = a.previous_rank >= 0, b_old = b.previous_rank >= 0;
    if (a_old != b_old) return a_old;
    return a_old ? a.previous_rank < b.previous_rank : a.index < b.index;
  });
  if (static_cast<int>(arrived.size()) > max_nodes_) arrived.resize(max_nodes_);
  std::string members;
  for (const auto& a : arrived) members += (members.empty() ? "" : " ") + std::to_string(a.index);
  std::string key = round_key(round, "members");
  store_->set(key, tagged(key, members));
  store_->set(kElastic + "open", std::to_string(round + 1));
  return true;
}

// Note [Store failover]: the store lives in node 0's launcher, so losing node 0 loses it. The
// survivors know the last round's members, so they agree without it on a successor: node 1, which
// hosts a new store at its own --local-addr and the port every node already knows, and seeds it
// with the run id, the next round and the failures counted so far, the last round's own among them
// when it failed (so --max-restarts still holds).
// Node 1 is then node 0 of every later round, and its rank 0 resumes from the newest checkpoint
// it can read (a shared filesystem, or a copy on that node). A node that only knows the old
// endpoint cannot join afterwards; and if node 1 was lost too, the job ends, saying which node hosted the store.
std::optional<std::string> ElasticRendezvous::take_over_store(bool round_failed,
                                                              const std::function<bool()>& interrupted) {
  if (round_ < 0 || members_.size() < 2 || members_.front().launcher == launcher_) return std::nullopt;
  clear_progress_line();  // its lines below start on a line of their own (Note [Unfinished lines])
  const Member& lost = members_[0];
  const Member& successor = members_[1];
  const bool host = successor.launcher == launcher_;
  const int port = this->port();
  std::string was = "node 0 (" + label(lost) + "), which hosted the rendezvous store at " + options_.master_addr + ":" +
                    std::to_string(port) + ", was lost";
  if (host && port_in_use(port)) {
    // c10d's store listens on every address of its machine: a stopped store host on this one holds
    // the port still (on a machine of its own, it never does).
    std::fprintf(stderr, "ddprun: %s, and node 1 (%s) cannot host a new one at port %d: it is in use on this "
                         "machine (by the stopped store host, if it runs here)\n", was.c_str(), successor.host.c_str(), port);
    return std::nullopt;
  }
  // The successor's --local-addr, a name every node resolves as node 0's was (under Slurm, maybe a
  // node name only Slurm knows: its NodeAddr then, as at start).
  std::string address = successor.host;
  if (!host) {
    try {
      auto resolved = resolve_master_address(successor.host, "give every node a --local-addr the others can resolve");
      if (!resolved.note.empty()) std::fprintf(stderr, "ddprun: %s\n", resolved.note.c_str());
      address = resolved.address;
    } catch (const UserError& e) {
      std::fprintf(stderr, "ddprun: %s, and node 1's address cannot be had: %s\n", was.c_str(), e.what());
      return std::nullopt;
    }
    // Node 1 hosts the new store once it has seen the loss (within --node-timeout) and stopped its
    // workers (within --shutdown-grace). One that has not by twice that, and 10 s for a loaded
    // machine, was lost with node 0: waiting out --rdzv-timeout would change nothing.
    const double within_s = 2 * (options_.node_timeout_s + options_.shutdown_grace_s) + 10;
    const auto within = std::min(timeout_, std::chrono::milliseconds(static_cast<int64_t>(within_s * 1000)));
    const std::string bound = seconds_text(std::chrono::duration<double>(within).count());
    std::fprintf(stderr, "ddprun: %s; waiting up to %s s for node 1 (%s) to host a new one at %s:%d\n", was.c_str(),
                 bound.c_str(), label(successor).c_str(), address.c_str(), port);
    if (!accepts_within(address, port, within, interrupted)) {
      if (interrupted()) return std::nullopt;  // the caller says which signal, and leaves
      std::fprintf(stderr, "ddprun: %s, and node 1 (%s), which would host a new one, did not (lost or gone too): "
                           "nothing accepted at %s:%d within %s s (twice --node-timeout and --shutdown-grace, and 10 s)\n",
                   was.c_str(), label(successor).c_str(), address.c_str(), port, bound.c_str());
      return std::nullopt;
    }
  }
  options_.master_addr = address;
  options_.master_port = port;
  store_.reset();
  try {
    store_ = open_store(host);
    hosts_store_ = host;
    const std::string open = std::to_string(round_ + 1);
    if (host) {
      int64_t highest = 0;
      for (const auto& m : members_) highest = std::max(highest, m.launcher);
      store_->set("ddprun/run_id", run_id_);
      store_->add(kElastic + "launchers", highest);
      std::string key = kElastic + "failures_before";
      store_->set(key, tagged(key, open + " " + std::to_string(failures_ + (round_failed ? 1 : 0))));
      publish_node_range();
      store_->set(kElastic + "open", open);
      store_->set(kElastic + "successor/" + open, "1");
    } else {
      // This takeover's mark, not "open": on node 1's machine, the address may still reach the old
      // store (a stopped host on the same machine listens on every address), which has one.
      store_->wait({kElastic + "successor/" + open}, timeout_);
    }
  } catch (const std::exception& e) {
    std::string cause = e.what();
    std::fprintf(stderr, "ddprun: %s, and node 1 (%s) could not host a new one within %lld s (%s)\n", was.c_str(),
                 successor.host.c_str(), static_cast<long long>(timeout_.count() / 1000),
                 cause.substr(0, cause.find('\n')).c_str());
    return std::nullopt;
  }
  return was + "; node 1 (" + label(successor) + ") hosts a new one at " + successor.host + ":" + std::to_string(port) +
         " from round " + std::to_string(round_ + 1);
}

std::string ElasticRendezvous::kind_word(MembershipChange::Kind kind) {
  switch (kind) {
    case MembershipChange::Kind::kStoreLost:
    case MembershipChange::Kind::kLost: return "lost";
    case MembershipChange::Kind::kLeft: return "left";
    case MembershipChange::Kind::kJoined: return "joined";
  }
  return "lost";
}

void ElasticRendezvous::announce(MembershipChange::Kind kind, const std::string& description) {
  std::string key = round_key(round_, "end");
  std::string value = tagged(key, kind_word(kind) + " " + description);
  std::string current = store_->compare_set(key, "", value);
  if (current != value && !verified(key, current, /*quiet=*/true)) store_->set(key, value);  // squatted: ours wins
}

std::optional<MembershipChange> ElasticRendezvous::check_membership() {
  const auto& o = options_;
  beat(std::chrono::milliseconds(0));
  std::string end_key = round_key(round_, "end");
  if (auto ended = read_verified(end_key)) {
    auto space = ended->find(' ');
    std::string word = ended->substr(0, space);
    MembershipChange change;
    change.kind = word == "left"     ? MembershipChange::Kind::kLeft
                  : word == "joined" ? MembershipChange::Kind::kJoined
                                     : MembershipChange::Kind::kLost;
    change.description = printable(space == std::string::npos ? *ended : ended->substr(space + 1));
    return change;
  }
  for (std::size_t rank = 0; rank < members_.size(); ++rank) {
    const Member& m = members_[rank];
    auto found = beats_.find(m.launcher);
    if (found == beats_.end()) continue;  // this node
    int64_t count = store_->add(kElastic + "alive/" + std::to_string(m.launcher), 0);
    auto& [last_count, since] = found->second;
    if (count != last_count) {
      last_count = count;
      since = Clock::now();
    } else if (seconds_since(since) >= o.node_timeout_s && store_->check(done_key(round_, static_cast<int>(rank)))) {
      // Its workers finished this round and its launcher ended (or waits, as node 0 does, for the
      // others): done, not lost, and no reason to stop this node's workers (torchrun's exit barrier).
      beats_.erase(found);
      finishing_ = true;
      return check_membership();
    } else if (seconds_since(since) >= o.node_timeout_s) {
      announce(MembershipChange::Kind::kLost,
               "node " + std::to_string(rank) + " (" + label(m) + ") was lost: its launcher sent no heartbeat for " +
                   seconds_text(seconds_since(since)) + " s (--node-timeout " + seconds_text(o.node_timeout_s) + ")");
      return check_membership();
    }
  }
  // A job some of whose nodes finished forms no next round: a joiner would stop the rest for nothing.
  if (!node_0_finished_) node_0_finished_ = store_->check(kElastic + "finished");
  finishing_ = finishing_ || node_0_finished_;
  if (!finishing_ && static_cast<int>(members_.size()) < max_nodes_ &&
      store_->add(round_key(round_ + 1, "arrivals"), 0) > 0) {
    // A joiner counts itself in before it writes its arrival: until that is written, the next
    // check names it (a loaded machine once announced "a node" here, unnamed).
    std::string first = round_key(round_ + 1, "arrival/0");
    if (!store_->check(first)) return std::nullopt;
    std::string who = "a node";
    if (auto value = read_verified(first)) {
      auto fields = split(*value, ' ');
      if (fields.size() == 6) who = "a node (" + printable(fields[2]) + ")";
      // A member of this round restarting after its failure, which it reported before it came:
      // that report ends the round (as a failure, on every node), not a join.
      const auto launcher = fields.empty() ? std::nullopt : parse_int(fields[0]);
      if (launcher && std::any_of(members_.begin(), members_.end(), [&](const Member& m) { return m.launcher == *launcher; }))
        return std::nullopt;
    }
    announce(MembershipChange::Kind::kJoined, who + " asks to join; room for " +
                                                  std::to_string(max_nodes_ - static_cast<int>(members_.size())) +
                                                  " more (--nnodes " + std::to_string(o.min_nodes) + ":" +
                                                  std::to_string(max_nodes_) + ")");
    return check_membership();
  }
  return std::nullopt;
}

void ElasticRendezvous::leave(const std::string& why) {
  try {
    std::string who = options_.local_addr;
    for (const auto& m : members_)
      if (m.launcher == launcher_) who = label(m);
    // Its own mark first: the announcement is the first leaver's only.
    store_->set(round_key(round_, "leaving/" + std::to_string(launcher_)), "1");
    announce(MembershipChange::Kind::kLeft, "node " + std::to_string(node_rank_in_round_) + " (" + who +
                                                ") is leaving: " + why);
  } catch (const std::exception&) {
    // The store may be gone; the others then notice this node's silence instead.
  }
}

std::optional<std::vector<bool>> ElasticRendezvous::members_leaving() {
  try {
    std::vector<bool> leaving;
    auto read = [&] {
      leaving.clear();
      for (const auto& m : members_)
        leaving.push_back(m.launcher == launcher_ ||
                          store_->check(round_key(round_, "leaving/" + std::to_string(m.launcher))));
    };
    // Others may leave too (scancel, a drain of several nodes), and signals sent at once are taken
    // apart, seconds apart on a loaded machine: a look 2 s on. The last to look sees every mark.
    std::this_thread::sleep_for(std::chrono::seconds(2));
    read();
    store_->set(round_key(round_, "asked/" + std::to_string(launcher_)), "1");
    // The store host keeps its store until the other leaving nodes have asked too: leaving first, it
    // took the answer with it (node 1, leaving with node 0, ended with no word of the others).
    std::vector<std::string> asked;
    for (std::size_t i = 0; i < members_.size(); ++i)
      if (leaving[i] && members_[i].launcher != launcher_)
        asked.push_back(round_key(round_, "asked/" + std::to_string(members_[i].launcher)));
    if (hosts_store_ && !asked.empty()) {
      const double within_s = options_.shutdown_grace_s + options_.node_timeout_s;
      try {
        store_->wait(asked, std::chrono::milliseconds(static_cast<int64_t>(within_s * 1000)));
      } catch (const std::exception&) {
        // One that has not asked by then is gone or frozen: the store closes without it.
      }
    }
    return leaving;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

void ElasticRendezvous::job_finished() {
  try {
    store_->set(kElastic + "finished", "1");
    // A launcher waiting to be admitted reads this every kPoll: the store stays up until it could
    // have, rather than vanish under it (which it would take for a lost store: exit 2).
    if (store_->add(round_key(round_ + 1, "arrivals"), 0) > 0) std::this_thread::sleep_for(10 * kPoll);
  } catch (const std::exception&) {
  }
}

}  // namespace ddp
