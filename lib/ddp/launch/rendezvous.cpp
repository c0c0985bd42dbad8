#include "ddp/launch/rendezvous.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <thread>

#include "ddp/common/error.h"
#include "ddp/common/port_probe.h"
#include "ddp/common/text.h"
#include "ddp/common/worker_contract.h"
#include "ddp/launch/hmac_sha256.h"
#include "ddp/launch/launch_options.h"
#include "ddp/launch/machine.h"
#include "ddp/launch/output_relay.h"
#include "ddp/launch/store_probe.h"

namespace ddp {
namespace {

// All launcher keys live under this prefix; workers use "/worker/attempt_N/" as torch elastic does.
const std::string kPrefix = "ddprun/";
// Starts a control value's tag (Note [Control values]).
const std::string kTagMarker = " #hmac=";

std::string endpoint(const LaunchOptions& o) { return o.master_addr + ":" + std::to_string(o.master_port); }

// Standard error sent to /dev/null while it lives (if `active`). The launcher has no other thread
// writing then: its output relays and monitor start after the rendezvous.
class QuietStderr {
 public:
  explicit QuietStderr(bool active) {
    if (!active) return;
    std::fflush(stderr);
    saved_ = dup(STDERR_FILENO);
    int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (saved_ >= 0 && null >= 0) dup2(null, STDERR_FILENO);
    if (null >= 0) close(null);
  }
  ~QuietStderr() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    dup2(saved_, STDERR_FILENO);
    close(saved_);
  }
  QuietStderr(const QuietStderr&) = delete;
  QuietStderr& operator=(const QuietStderr&) = delete;

 private:
  int saved_ = -1;
};

// Whether `host` names an address of this machine: one a socket can bind to.
bool is_local_address(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return false;
  bool local = false;
  for (addrinfo* a = found; a && !local; a = a->ai_next) {
    int fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    local = bind(fd, a->ai_addr, a->ai_addrlen) == 0;  // port 0 as resolved: any free one
    close(fd);
  }
  freeaddrinfo(found);
  return local;
}

// A c10d client fed another service's reply dies of it (store_probe.h); this says who answered.
void refuse_foreign_service(const LaunchOptions& o) {
  if (auto reply = service_reply(o.master_addr, o.master_port, std::chrono::milliseconds(300)))
    throw UserError("something that is not a ddprun (c10d) store answers on " + endpoint(o) + " (" + *reply +
                    "): is the port (--master-port or --rdzv-endpoint) another service's? give every node of the job "
                    "the same free port");
}

// Note [Store directory owner]: a store directory holds a lock file, flocked by its launcher for its
// whole life; the kernel drops the lock however the launcher dies. The watchdog removes the directory
// after a SIGKILL (it has a process group of its own, so `kill -9 -- -PGID` of ddprun's group misses
// it), and whatever survives even that (the watchdog killed too, a machine reset) is swept by the
// next launcher here: a directory whose lock file it can lock has no owner left. The lock file is
// made under another name and renamed once locked, so a sweep never sees it unlocked while its
// owner starts.
const char* const kOwnerLock = ".owner.lock";

void sweep_orphaned_store_dirs(const std::string& tmp) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(tmp, ec)) {
    if (entry.path().filename().string().rfind("ddprun-store-", 0) != 0) continue;
    struct stat info {};
    if (lstat(entry.path().c_str(), &info) != 0 || !S_ISDIR(info.st_mode) || info.st_uid != getuid()) continue;
    int fd = open((entry.path() / kOwnerLock).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;  // not one of ours, or made before owners were recorded: left alone
    bool orphaned = flock(fd, LOCK_EX | LOCK_NB) == 0;
    if (orphaned) std::filesystem::remove_all(entry.path(), ec);
    close(fd);
  }
}

}  // namespace

PrivateStoreDir::PrivateStoreDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string base = tmp && *tmp ? tmp : "/tmp";
  sweep_orphaned_store_dirs(base);
  std::string pattern = base + "/ddprun-store-XXXXXX";
  if (!mkdtemp(pattern.data()))
    throw UserError("cannot create a private store directory like " + pattern + ": " + std::strerror(errno));
  path_ = pattern;
  std::string making = path_ + "/.owner.new";
  lock_fd_ = open(making.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (lock_fd_ < 0 || flock(lock_fd_, LOCK_EX) != 0 || rename(making.c_str(), (path_ + "/" + kOwnerLock).c_str()) != 0) {
    std::string cause = std::strerror(errno);
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
    if (lock_fd_ >= 0) close(lock_fd_);
    throw UserError("cannot lock the private store directory " + path_ + ": " + cause);
  }
}

PrivateStoreDir::~PrivateStoreDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
  close(lock_fd_);
}

std::string role_word(const std::string& role) {
  static const char* kDigits = "0123456789abcdef";
  std::string word;
  for (unsigned char c : role) word += {kDigits[c >> 4], kDigits[c & 15]};
  return word.empty() ? "-" : word;
}

void WorldLayout::count_role(const std::string& role, int nproc, bool before, const std::string& mine) {
  if (role != role_word(mine)) return;
  if (before) role_rank_offset += nproc;
  role_world_size += nproc;
}

std::string generate_run_id() {
  std::random_device device;
  static const char kHex[] = "0123456789abcdef";
  std::string id;
  for (int i = 0; i < 12; ++i) id += kHex[device() % 16];
  return id;
}

Rendezvous::Rendezvous(const LaunchOptions& options)
    : options_(options),
      timeout_(static_cast<int64_t>(options.rdzv_timeout_s * 1000)),
      answer_within_(options.elastic() ? static_cast<int64_t>(options.node_timeout_s * 1000) : 0) {
  // Note [Who hosts the store]: with static node ranks, node 0. By arrival (c10d), a launcher on the
  // endpoint's host whose bind succeeds, which then is node 0: on several launchers sharing that
  // address the first to bind wins, and the others, like every launcher elsewhere, connect.
  bool host = options.node_rank_by_arrival
                  ? is_local_address(options.master_addr) && !port_in_use(options.master_port)
                  : options.node_rank == 0;
  if (!host) {
    wait_for_store_host();
    refuse_foreign_service(options);
  }
  if (host && !options.node_rank_by_arrival && port_in_use(options.master_port))
    throw UserError("port " + std::to_string(options.master_port) + " on " + options.master_addr +
                    " is already in use (another ddprun or torchrun?); choose another with --master-port, or "
                    "--master-port 0 (or --standalone) for a free one");
  try {
    // A lost race is expected here, and c10d logs it (bind failures, "failed to listen") before
    // throwing: those lines would read as an error in a run that works.
    QuietStderr quiet(host && options.node_rank_by_arrival);
    store_ = open_store(host);
  } catch (const StoreError& e) {
    // Lost the race to bind (Note [Who hosts the store]): another launcher here hosts it.
    if (!(host && options.node_rank_by_arrival && e.kind() == StoreError::Kind::kPortInUse)) throw;
    host = false;
    store_ = open_store(host);
  }
  hosts_store_ = host;
  if (options.nnodes > 1 && options.rdzv_secret.empty() && host)
    std::fprintf(stderr, "ddprun: warning: anyone who reaches port %d can read and write this job's rendezvous store, "
                         "and stop the job; set %s (or --rdzv-secret-file) to the same secret on every node, and keep "
                         "the port off untrusted networks (docs/faults.md)\n",
                 options.master_port, env::kRdzvSecret);
}

void Rendezvous::wait_for_store_host() const {
  // A node started before node 0 waits for it, and says so after a moment (was: silent up to
  // --rdzv-timeout, then c10d's time-out through glog before ddprun's own words).
  const auto& o = options_;
  const auto first_look = std::min<std::chrono::milliseconds>(timeout_, std::chrono::seconds(3));
  if (accepts_within(o.master_addr, o.master_port, first_look)) return;
  say("waiting for the rendezvous at " + endpoint(o) + ", which " +
      (o.node_rank_by_arrival ? "a ddprun on the host of --rdzv-endpoint" : "node 0's ddprun") +
      " hosts (up to --rdzv-timeout, " + std::to_string(timeout_.count() / 1000) + " s)");
  if (accepts_within(o.master_addr, o.master_port, timeout_ - first_look)) return;
  throw UserError(
      "cannot reach the rendezvous at " + endpoint(o) + " within " + std::to_string(timeout_.count() / 1000) + " s: " +
      (o.node_rank_by_arrival ? "is a ddprun running on the host of --rdzv-endpoint, with the same port?"
                              : "is node 0's ddprun running there with the same --master-addr/--master-port?"));
}

std::unique_ptr<KvStore> Rendezvous::open_store(bool host) {
  const auto& options = options_;
  KvStoreOptions store_options;
  store_options.host = options.master_addr;
  store_options.port = options.master_port;
  store_options.is_server = host;
  store_options.timeout = timeout_;
  store_options.answer_within = answer_within_;  // elastic: a silent store host is lost like any node
  try {
    return open_tcp_store(store_options);
  } catch (const StoreError& e) {
    std::string cause = e.what();
    const bool in_use = e.kind() == StoreError::Kind::kPortInUse;
    if (host && options.node_rank_by_arrival && in_use) throw;
    if (host && in_use)
      throw UserError("port " + std::to_string(options.master_port) + " on " + options.master_addr +
                      " is already in use; choose another with --master-port, or --master-port 0");
    if (host) throw UserError("cannot host the rendezvous at " + endpoint(options) + ": " + cause);
    std::string who = options.node_rank_by_arrival
                          ? "is a ddprun running on the host of --rdzv-endpoint, with the same port?"
                          : "is node 0's ddprun running there with the same --master-addr/--master-port?";
    throw UserError("cannot reach the rendezvous at " + endpoint(options) + " within " +
                    std::to_string(timeout_.count() / 1000) + " s: " + who + " (" + cause.substr(0, cause.find('\n')) +
                    ")");
  }
}

Rendezvous::~Rendezvous() = default;

int Rendezvous::port() const { return store_->port(); }

WorldLayout Rendezvous::join() {
  try {
    return join_store();
  } catch (const UserError&) {
    throw;
  } catch (const std::exception& e) {
    // c10d's own words ("Broken pipe", "Connection reset by peer") do not say who left.
    std::string cause = e.what();
    throw UserError("lost the rendezvous at " + endpoint(options_) +
                    ": node 0's ddprun, which hosts it, went away (it gives up when nodes are missing after "
                    "--rdzv-timeout, or it failed: see its output) (" + cause.substr(0, cause.find('\n')) + ")");
  }
}

WorldLayout Rendezvous::join_store() {
  const auto& o = options_;
  WorldLayout layout;
  if (o.node_rank_by_arrival) options_.node_rank = hosts_store_ ? 0 : -1;  // -1: the first free rank from 1
  if (options_.node_rank == 0) {
    layout.run_id = o.run_id.empty() ? generate_run_id() : o.run_id;
    store_->set(kPrefix + "run_id", layout.run_id);
  } else {
    // Note [Run id before a node rank]: a launcher of another job on the same endpoint (another
    // --rdzv-id) is refused before it takes a node rank, or it would take the place of the job's
    // own node and leave the job waiting for a node that was already turned away.
    layout.run_id = wait_for_run_id();
    check_run_id(layout.run_id);  // it names this node's log directory too
    if (!o.run_id.empty() && o.run_id != layout.run_id)
      throw UserError("run id " + o.run_id + " (--run-id/--rdzv-id) differs from " + layout.run_id +
                      ", the run id of the job whose node 0 hosts the rendezvous at " + endpoint(o) +
                      ": another job uses this endpoint; give each job its own --master-port/--rdzv-endpoint, "
                      "and every node of a job the same id");
  }
  run_id_ = layout.run_id;  // registrations are tagged with it (Note [Secret check at join])
  // "host nproc nnodes pid role": the pid tells two launchers on one host apart (Note [Role ranks]).
  std::string me = o.local_addr + " " + std::to_string(o.nproc_per_node) + " " + std::to_string(o.nnodes) + " " +
                   std::to_string(getpid()) + " " + role_word(o.role);
  auto node_key = [](int r) { return kPrefix + "node/" + std::to_string(r); };
  if (options_.node_rank < 0) {
    for (int r = 1; r < o.nnodes && options_.node_rank < 0; ++r)
      if (store_->compare_set(node_key(r), "", tagged(node_key(r), me)) == tagged(node_key(r), me))
        options_.node_rank = r;
    if (options_.node_rank < 0)
      throw UserError("all " + std::to_string(o.nnodes) + " node ranks at " + endpoint(o) +
                      " are taken: more launchers than --nnodes joined this rendezvous");
  }
  std::string my_key = node_key(options_.node_rank);
  std::string mine = tagged(my_key, me);
  std::string stored = store_->compare_set(my_key, "", mine);
  if (stored != mine)
    throw UserError("node rank " + std::to_string(options_.node_rank) + " has already joined (" +
                    printable(stored.substr(0, stored.find(kTagMarker))) + "); give each node its own --node-rank");
  store_->set(my_key, mine);  // compareSet does not wake waiters in c10d's TCPStore; set does
  layout.node_rank = options_.node_rank;

  std::vector<std::string> keys;
  for (int r = 0; r < o.nnodes; ++r) keys.push_back(node_key(r));
  keys.push_back(kPrefix + "run_id");
  // Note [Checked before the store closes]: every node checks what the others registered, and a
  // mismatch fails every node. Node 0 may find it first, but its store must stay up until the others
  // have read what they need to find it too, or they would only see the connection drop.
  std::string checked = kPrefix + "checked/";
  auto fail = [&](const UserError& error) {
    store_->set(checked + std::to_string(options_.node_rank), "1");
    if (options_.node_rank == 0) {
      std::vector<std::string> others;
      for (int r = 1; r < o.nnodes; ++r)
        if (store_->check(keys[r])) others.push_back(checked + std::to_string(r));
      try {
        store_->wait(others, std::min<std::chrono::milliseconds>(timeout_, std::chrono::seconds(10)));
      } catch (const std::exception&) {
        // A node that never checks has its own trouble; this node's error says enough.
      }
    }
    throw error;
  };
  // Note [Node counts]: a node started with another --nnodes than node 0's would wait for nodes that
  // never come (or node 0 would), and learn only that the others went away. Each node compares its
  // count with node 0's as soon as node 0 has registered, and one that differs says so in a key
  // every node looks at while it waits (one look a second each, however many nodes).
  const std::string count_mismatch = kPrefix + "count_mismatch";
  auto count_of = [&](int r) {
    const std::string value = store_->get(keys[r]);
    const auto fields = split(value.substr(0, value.rfind(kTagMarker)), ' ');
    return fields.size() >= 4 ? std::pair{printable(fields[0]), printable(fields[2])}
                              : std::pair{std::string(), std::string()};
  };
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (bool compared = options_.node_rank == 0;;) {
    if (!compared && store_->check(keys[0])) {
      compared = true;
      if (const auto [host, count] = count_of(0); !count.empty() && count != std::to_string(o.nnodes)) {
        store_->set(count_mismatch, "node " + std::to_string(options_.node_rank) + " (" + o.local_addr +
                                        ") was started with --nnodes " + std::to_string(o.nnodes));
        fail(UserError("node 0 (" + host + ") was started with --nnodes " + count + " but this node with --nnodes " +
                       std::to_string(o.nnodes)));
      }
    }
    if (store_->check(count_mismatch))
      fail(UserError(printable(store_->get(count_mismatch)) + " but this node with --nnodes " +
                     std::to_string(o.nnodes)));
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    try {
      store_->wait(keys,
                   std::clamp<std::chrono::milliseconds>(left, std::chrono::milliseconds(1), std::chrono::seconds(1)));
      break;
    } catch (const StoreError& e) {
      if (e.kind() != StoreError::Kind::kTimedOut) throw;  // the store gone: join() says who left
      if (std::chrono::steady_clock::now() < deadline) continue;
      std::vector<long long> missing;
      for (int r = 0; r < o.nnodes; ++r)
        if (!store_->check(keys[r])) missing.push_back(r);
      throw UserError("rendezvous at " + endpoint(o) + " timed out after " + std::to_string(timeout_.count() / 1000) +
                      " s waiting for node(s) " + number_runs(missing) + " of " + std::to_string(o.nnodes) +
                      " (never started, or cannot reach " + endpoint(o) + "? see their output)");
    }
  }
  try {
    check_registrations(keys, layout);
  } catch (const UserError& e) {
    fail(e);
  }
  store_->set(checked + std::to_string(options_.node_rank), "1");
  return layout;
}

std::string Rendezvous::wait_for_run_id() {
  try {
    return store_->get(kPrefix + "run_id");
  } catch (const StoreError& e) {
    if (e.kind() != StoreError::Kind::kTimedOut) throw;
    throw UserError("reached " + endpoint(options_) + " but node 0 did not start the rendezvous there within " +
                    std::to_string(timeout_.count() / 1000) + " s: is a ddprun of this job node 0?");
  }
}

// Note [Secret check at join]: each node's registration carries a tag under its secret (Note
// [Control values]). A node whose secret differs would otherwise run to the end while ignoring, as
// written from outside, every failure the others report; so a tag that does not verify, or one
// where this node has no secret (or none where it has one), fails the rendezvous on every node.
void Rendezvous::check_registrations(const std::vector<std::string>& keys, WorldLayout& layout) {
  const auto& o = options_;
  std::string differ;
  for (int r = 0; r < o.nnodes; ++r) {
    std::string stored = store_->get(keys[r]);
    auto at = stored.rfind(kTagMarker);
    std::string value = stored.substr(0, at);
    auto fields = split(value, ' ');
    if (fields.size() < 4) throw UserError("node " + std::to_string(r) + " registered as '" + printable(value, 200) +
                                           "' at " + endpoint(o) + ", not as a ddprun would: is another program "
                                           "writing to this store?");
    if (!same_secret(keys[r], stored)) differ += (differ.empty() ? "" : ", ") + std::to_string(r) + " (" + printable(fields[0]) + ")";
    int nproc = static_cast<int>(parse_int(fields.at(1)).value_or(0));
    int nnodes = static_cast<int>(parse_int(fields.at(2)).value_or(0));
    if (nnodes != o.nnodes)
      throw UserError("node " + std::to_string(r) + " (" + printable(fields[0]) + ") was started with --nnodes " +
                      printable(fields[2]) + " but this node with --nnodes " + std::to_string(o.nnodes));
    if (r < options_.node_rank) layout.rank_offset += nproc;
    layout.world_size += nproc;
    layout.count_role(fields.size() > 4 ? fields[4] : role_word("default"), nproc, r < options_.node_rank, o.role);
    layout.hosts.push_back(printable(fields[0], 255));
    layout.node_count += 1;
  }
  if (!differ.empty()) refuse_other_secret(differ);
}

bool Rendezvous::same_secret(const std::string& key, const std::string& stored) const {
  const auto at = stored.rfind(kTagMarker);
  return options_.rdzv_secret.empty() ? at == std::string::npos
                                      : at != std::string::npos && verified(key, stored, /*quiet=*/true);
}

void Rendezvous::refuse_other_secret(const std::string& nodes) const {
  const auto& o = options_;
  throw UserError("node(s) " + nodes + " of the rendezvous at " + endpoint(o) +
                  " have a different rendezvous secret than this node" +
                  (o.elastic() ? std::string(o.rdzv_secret.empty() ? " (which has none)" : "")
                               : " (node " + std::to_string(o.node_rank) + (o.rdzv_secret.empty() ? ", which has none" : "") + ")") +
                  ": set the same " + env::kRdzvSecret + " (or --rdzv-secret-file) on every node, or none on any");
}

// Note [Control values]: the store's port admits anyone who reaches it, so a control value (a
// failure report, which stops every node) counts only if it verifies: with the job's secret set,
// it ends in kTagMarker + HMAC-SHA256(secret, run id + "\n" + key + "\n" + value), binding it to this
// run and key: a value read from an earlier job with the same secret, or from another attempt, does
// not verify. Without a secret every value counts, as with torchrun, and a multi-node run says so once.

std::string Rendezvous::tagged(const std::string& key, const std::string& value) const {
  if (options_.rdzv_secret.empty()) return value;
  return value + kTagMarker + hmac_sha256_hex(options_.rdzv_secret, run_id_ + "\n" + key + "\n" + value);
}

std::optional<std::string> Rendezvous::verified(const std::string& key, const std::string& stored, bool quiet) const {
  if (options_.rdzv_secret.empty()) return stored;
  auto at = stored.rfind(kTagMarker);
  if (at != std::string::npos) {
    std::string value = stored.substr(0, at);
    std::string expected = hmac_sha256_hex(options_.rdzv_secret, run_id_ + "\n" + key + "\n" + value);
    if (constant_time_equal(stored.substr(at + kTagMarker.size()), expected))
      return value;
  }
  if (!quiet && ignored_.insert(key).second)
    say("ignoring " + key +
        " in the rendezvous store: it has no valid tag for this job's secret (written from "
        "outside the job?): " +
        printable(stored, 200));
  return std::nullopt;
}

void Rendezvous::report_failure(int attempt, const RemoteFailure& failure) {
  std::string key = kPrefix + "attempt_" + std::to_string(attempt) + "/failure";
  const char* kind = failure.interrupted ? " i " : failure.restartable ? " r " : " f ";
  std::string value = tagged(key, std::to_string(failure.exit_code) + kind + failure.description);
  try {
    // The first report wins, unless what is there does not verify (squatted by an outsider).
    std::string current = store_->compare_set(key, "", value);
    if (current != value && !verified(key, current)) store_->set(key, value);
  } catch (const std::exception&) {
    // The store may already be gone; the other nodes then notice it themselves.
  }
}

std::optional<RemoteFailure> Rendezvous::remote_failure(int attempt) {
  std::string key = kPrefix + "attempt_" + std::to_string(attempt) + "/failure";
  if (!store_->check(key)) return std::nullopt;
  // "CODE r|f|i DESCRIPTION": restartable, failed for good, or interrupted (a stop, not restartable)
  auto checked = verified(key, store_->get(key));
  if (!checked) return std::nullopt;
  const std::string& value = *checked;
  RemoteFailure failure;
  auto space = value.find(' ');
  failure.exit_code = static_cast<int>(parse_int(value.substr(0, space)).value_or(1));
  failure.restartable = value.compare(space + 1, 1, "r") == 0;
  failure.interrupted = value.compare(space + 1, 1, "i") == 0;
  // Anyone who reaches the store's port can write this: it reaches the terminal only as plain text.
  failure.description = printable(value.size() > space + 3 ? value.substr(space + 3) : value);
  return failure;
}

bool Rendezvous::barrier_before(int attempt, const std::function<bool()>& interrupted) {
  std::string prefix = kPrefix + "attempt_" + std::to_string(attempt) + "/ready/";
  store_->set(prefix + std::to_string(options_.node_rank), "1");
  // Polled rather than one blocking wait, so that a signal to the launcher is acted on at once.
  using Clock = std::chrono::steady_clock;
  auto deadline = Clock::now() + timeout_;
  const std::string finished = kPrefix + "attempt_" + std::to_string(attempt - 1) + "/done/";
  std::map<int, std::pair<int64_t, Clock::time_point>> beats;  // by node: its alive count, when it last moved
  while (true) {
    std::vector<int> missing;
    for (int r = 0; r < options_.nnodes; ++r)
      if (!store_->check(prefix + std::to_string(r))) missing.push_back(r);
    if (missing.empty()) return true;
    if (interrupted()) return false;
    // A node whose workers all exited 0 has finished and gone: waiting out the timeout for it would
    // end in a time-out's exit 2, the failure that asked for the restart lost.
    std::string gone;
    for (int r : missing) {
      if (!store_->check(finished + std::to_string(r))) continue;
      const std::string status = store_->get(finished + std::to_string(r));
      gone += (gone.empty() ? "node " : "; node ") + std::to_string(r) +
              (status == "0" ? " finished it (its workers exited 0)"
                             : " ended it with exit status " + printable(status, 8) + " and does not restart");
    }
    if (!gone.empty())
      throw RestartCannotForm("restart attempt " + std::to_string(attempt) + " cannot form: of attempt " +
                              std::to_string(attempt - 1) + ", " + gone);
    // Note [Silent nodes]: a node killed (SIGKILL, its host lost) never comes back; waiting out
    // --rdzv-timeout for it said nothing for minutes, then blamed the rendezvous (exit 2).
    std::string silent;
    for (int r : missing) {
      const int64_t count = store_->add(kPrefix + "alive/" + std::to_string(r), 0);
      auto [seen, fresh] = beats.emplace(r, std::make_pair(count, Clock::now()));
      if (!fresh && seen->second.first != count) seen->second = {count, Clock::now()};
      if (Clock::now() - seen->second.second >= silence_limit()) {
        silent += (silent.empty() ? "node " : ", node ") + std::to_string(r);
        silent_nodes_.insert(r);  // finish() waits for it no more
      }
    }
    if (!silent.empty())
      throw RestartCannotForm("restart attempt " + std::to_string(attempt) + " cannot form: " + silent +
                              "'s launcher has sent no heartbeat for " +
                              std::to_string(std::chrono::duration_cast<std::chrono::seconds>(silence_limit()).count()) +
                              " s (killed, or its host lost)");
    beat_alive();  // Note [Silent nodes]: node 0 may be finishing, not restarting
    if (Clock::now() > deadline) {
      std::string waited;
      for (int r : missing) waited += (waited.empty() ? "" : ", ") + std::to_string(r);
      throw UserError("not every node came back for restart attempt " + std::to_string(attempt) + " within " +
                      std::to_string(timeout_.count() / 1000) + " s: node(s) " + waited + " did not");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

std::chrono::steady_clock::duration Rendezvous::silence_limit() const {
  return std::max<std::chrono::steady_clock::duration>(
      std::chrono::seconds(15), std::chrono::milliseconds(static_cast<int64_t>(4000 * options_.monitor_interval_s)));
}

void Rendezvous::beat_alive() {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_alive_beat_ < std::chrono::seconds(1)) return;
  last_alive_beat_ = now;
  try {
    store_->add(kPrefix + "alive/" + std::to_string(options_.node_rank), 1);
  } catch (const std::exception&) {
  }
}

std::string Rendezvous::done_key(int attempt, int node_rank) {
  return kPrefix + "attempt_" + std::to_string(attempt) + "/done/" + std::to_string(node_rank);
}

void Rendezvous::finish(int attempt, const std::function<bool()>& interrupted, int exit_status) {
  const std::string prefix = kPrefix + "attempt_" + std::to_string(attempt) + "/done/";  // as done_key
  try {
    store_->set(prefix + std::to_string(options_.node_rank), std::to_string(exit_status));
    if (options_.node_rank != 0) return;
    auto waiting_for = [&] {
      std::vector<std::string> keys;
      for (int r = 1; r < options_.nnodes; ++r)
        if (!store_->check(prefix + std::to_string(r))) keys.push_back(prefix + std::to_string(r));
      return keys;
    };
    auto keys = waiting_for();
    std::set<std::string> silent;  // those already found silent before a restart are not waited for again
    for (int r : silent_nodes_) silent.insert(prefix + std::to_string(r));
    keys.erase(std::remove_if(keys.begin(), keys.end(), [&](const std::string& k) { return silent.count(k) > 0; }),
               keys.end());
    if (keys.empty()) return;
    // The store must outlive every other node's last use of it. Polled, as barrier_before is: a
    // node that was SIGKILLed never says it is done, and a signal here must not wait for it.
    std::fprintf(stderr,
                 "ddprun: waiting up to %lld s for %zu other node(s) to finish before closing the store "
                 "(Ctrl-C stops waiting)\n",
                 static_cast<long long>(timeout_.count() / 1000), keys.size());
    using Clock = std::chrono::steady_clock;
    const auto deadline = Clock::now() + timeout_;
    // Note [Silent nodes]: every launcher beats in the store while it lives (beat_alive, from its
    // monitor loop, at least every --monitor-interval); one whose beats stop for long after its
    // last (SIGKILLed, its host lost) will never say it is done, and is waited for no longer.
    const auto silence = silence_limit();
    std::map<std::string, std::pair<int64_t, Clock::time_point>> beats;  // by done key: the count, when it last moved
    while (!keys.empty() && Clock::now() < deadline) {
      if (interrupted()) {
        std::fprintf(stderr, "ddprun: a signal: closing the store without waiting for %zu other node(s)\n",
                     keys.size());
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      keys = waiting_for();
      for (const auto& key : keys) {
        const std::string node = key.substr(prefix.size());
        const int64_t count = store_->add(kPrefix + "alive/" + node, 0);
        auto [seen, fresh] = beats.emplace(key, std::make_pair(count, Clock::now()));
        if (!fresh && seen->second.first != count) seen->second = {count, Clock::now()};
        if (Clock::now() - seen->second.second >= silence && silent.insert(key).second)
          std::fprintf(stderr,
                       "ddprun: node %s's launcher has sent no heartbeat for %lld s (killed, or its host lost): "
                       "closing the store without waiting for it\n",
                       node.c_str(),
                       static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(silence).count()));
      }
      keys.erase(std::remove_if(keys.begin(), keys.end(), [&](const std::string& k) { return silent.count(k) > 0; }),
                 keys.end());
    }
  } catch (const std::exception&) {
    // A node that never reports done has failed or vanished; its own launcher says so.
  }
}

}  // namespace ddp
