#pragma once
// The launcher's view of c10d's TCPStore. The store lives in a plugin (libddprun_tcpstore.so) that
// is loaded only when a run needs it: LibTorch takes ~0.5 s and ~150 MB just to load, and a
// single-node trainer run (a private FileStore) needs none of it.

#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace ddp {

/// Where the store is and who hosts it.
struct KvStoreOptions {
  std::string host;
  int port = 0;  ///< 0 with is_server: a free port
  bool is_server = false;
  std::chrono::milliseconds timeout{0};
  /// A store host that sends no reply this long (beyond what an operation waits for by design) is
  /// taken for frozen: the call throws StoreNotAnswering, and so does every later one. 0: wait as
  /// long as the host does (Note [A frozen store host]).
  std::chrono::milliseconds answer_within{0};
};

/// A store operation that failed, by cause: the launcher decides on the kind, never on the wording
/// of c10d's messages (which differs between LibTorch versions). what() is c10d's reason.
class StoreError : public std::runtime_error {
 public:
  enum class Kind {
    kPortInUse,     ///< hosting: the port is bound on this machine already
    kTimedOut,      ///< get or wait waited as long as it was allowed to: a key never set
    kNotAnswering,  ///< the host sent no reply within KvStoreOptions::answer_within
    kFailed,        ///< anything else: a refused or reset connection, a malformed reply
  };
  StoreError(Kind kind, const std::string& what) : std::runtime_error(what), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

/// The store's host did not answer within KvStoreOptions::answer_within.
class StoreNotAnswering : public StoreError {
 public:
  explicit StoreNotAnswering(const std::string& what) : StoreError(Kind::kNotAnswering, what) {}
};

/// The key-value operations the launcher uses. Methods throw StoreError.
class KvStore {
 public:
  virtual ~KvStore() = default;
  /// Stores `value` under `key`, waking waiters.
  virtual void set(const std::string& key, const std::string& value) = 0;
  /// The value of `key`, waiting (up to the store's timeout) until it exists.
  virtual std::string get(const std::string& key) = 0;
  /// Whether `key` exists now.
  virtual bool check(const std::string& key) = 0;
  /// Adds `amount` to the counter under `key` (absent: 0) and returns its new value, atomically.
  virtual int64_t add(const std::string& key, int64_t amount) = 0;
  /// Sets `desired` if the key holds `expected` ("" = absent); returns the value now stored.
  virtual std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) = 0;
  /// Waits until every key exists; throws after `timeout`.
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  /// The port actually bound (or connected to).
  virtual int port() const = 0;
};

/// Loads the plugin beside ddprun (or in ../lib/ddprun/) and opens a TCPStore: hosts it when
/// is_server, else connects, retrying until the timeout. Throws StoreError with c10d's reason
/// (kPortInUse when hosting on a port taken here, else kFailed), or UserError when the plugin
/// cannot be loaded.
std::unique_ptr<KvStore> open_tcp_store(const KvStoreOptions& options);

}  // namespace ddp

/// The plugin's entry point: a new store, or null with the reason in `error`.
extern "C" ddp::KvStore* ddprun_open_tcp_store(const ddp::KvStoreOptions* options, char* error, std::size_t error_size);
