#include "ddp/launch/kv_store.h"

#include <dlfcn.h>

#include <cstdio>
#include <functional>
#include <future>
#include <optional>
#include <stdexcept>
#include <thread>

#include "ddp/common/error.h"
#include "ddp/common/port_probe.h"
#include "ddp/launch/machine.h"

namespace ddp {
namespace {

using OpenFunction = decltype(&ddprun_open_tcp_store);

OpenFunction load_plugin() {
  static OpenFunction open = [] {
    std::string dir = executable_dir();
    std::string tried;
    // Beside ddprun in a build tree; installed, in libexec (a private module: no ldconfig, so the
    // Debian package needs no maintainer scripts), or lib as `cmake --install` used to put it.
    for (const std::string& path : {dir + "/libddprun_tcpstore.so", dir + "/../libexec/ddprun/libddprun_tcpstore.so",
                                    dir + "/../lib/ddprun/libddprun_tcpstore.so"}) {
      // Kept loaded for the life of the process: stores made by it may live until exit.
      if (void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) {
        if (auto function = reinterpret_cast<OpenFunction>(dlsym(handle, "ddprun_open_tcp_store"))) return function;
      }
      const char* reason = dlerror();  // each call clears it
      tried += (tried.empty() ? "" : "; ") + std::string(reason ? reason : path);
    }
    throw UserError("cannot load ddprun's TCP store plugin (" + tried + "); reinstall ddprun");
  }();
  return open;
}

// Note [A frozen store host]: a store host that is stopped (SIGSTOP, a frozen VM) or cut off by a
// silent partition keeps its TCP connections open, and c10d's client then waits for its reply
// without end: a launcher sat in such a read says nothing, notices no failure and takes nothing
// over. So each call runs on a thread of its own and the caller waits for it at most as long as
// the call waits by design plus answer_within; past that the host counts as frozen. The thread
// that still waits is left behind, owning the store (a reply may never come), and every later call
// fails at once: the caller goes on to a new store (Note [Store failover]).
class AnsweringStore : public KvStore {
 public:
  AnsweringStore(std::unique_ptr<KvStore> store, const KvStoreOptions& options)
      : store_(std::move(store)), options_(options) {}

  void set(const std::string& key, const std::string& value) override {
    call<bool>([=](KvStore& s) { return s.set(key, value), true; });
  }
  std::string get(const std::string& key) override {
    return call<std::string>([=](KvStore& s) { return s.get(key); }, options_.timeout);
  }
  bool check(const std::string& key) override {
    return call<bool>([=](KvStore& s) { return s.check(key); });
  }
  int64_t add(const std::string& key, int64_t amount) override {
    return call<int64_t>([=](KvStore& s) { return s.add(key, amount); });
  }
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) override {
    return call<std::string>([=](KvStore& s) { return s.compare_set(key, expected, desired); });
  }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    call<bool>([=](KvStore& s) { return s.wait(keys, timeout), true; }, timeout);
  }
  int port() const override { return store_->port(); }

 private:
  template <typename T>
  T call(std::function<T(KvStore&)> operation, std::chrono::milliseconds waits = std::chrono::milliseconds(0)) {
    if (frozen_) throw StoreNotAnswering(*frozen_);
    auto result = std::make_shared<std::promise<T>>();
    std::future<T> reply = result->get_future();
    std::thread([store = store_, operation = std::move(operation), result] {
      try {
        result->set_value(operation(*store));
      } catch (...) {
        result->set_exception(std::current_exception());
      }
    }).detach();
    if (reply.wait_for(waits + options_.answer_within) == std::future_status::timeout) {
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%g", static_cast<double>(options_.answer_within.count()) / 1000);
      frozen_ = "the store host stopped answering (no reply in " + std::string(seconds) + " s)";
      throw StoreNotAnswering(*frozen_);
    }
    return reply.get();
  }

  std::shared_ptr<KvStore> store_;
  KvStoreOptions options_;
  std::optional<std::string> frozen_;
};

}  // namespace

std::unique_ptr<KvStore> open_tcp_store(const KvStoreOptions& options) {
  OpenFunction open = load_plugin();
  char error[1024] = {};
  KvStore* store = open(&options, error, sizeof error);
  if (!store) {  // by what is so, not by c10d's words: the port taken on this machine
    bool in_use = options.is_server && port_in_use(options.port);
    throw StoreError(in_use ? StoreError::Kind::kPortInUse : StoreError::Kind::kFailed, error);
  }
  std::unique_ptr<KvStore> opened(store);
  if (options.answer_within.count() > 0) return std::make_unique<AnsweringStore>(std::move(opened), options);
  return opened;
}

}  // namespace ddp
