// libddprun_tcpstore.so: KvStore over c10d's TCPStore. The only launcher code that touches LibTorch.
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <set>

#include "ddp/launch/kv_store.h"

namespace {

std::vector<uint8_t> bytes(const std::string& text) { return {text.begin(), text.end()}; }
std::string text(const std::vector<uint8_t>& data) { return {data.begin(), data.end()}; }

std::set<int> open_descriptors() {
  std::set<int> open;
  if (DIR* dir = opendir("/proc/self/fd")) {
    while (dirent* entry = readdir(dir))
      if (entry->d_name[0] != '.') open.insert(std::atoi(entry->d_name));
    closedir(dir);
  }
  return open;
}

// Note [c10d's callback thread]: LibTorch 1.13's TCPStore client runs a thread for watchKey (which
// ddprun never calls) that polls a second connection to the host, and throws, ending the whole
// launcher, when that connection is reset: as it is when a store host that was stopped goes away
// without having taken the connections that reached it meanwhile (a node taking the store over on
// the host's machine connects to it; test_kv_store.cpp). So the thread is stopped as soon as the
// client is made, the way its destructor stops it: the write end of its control pipe, the one pipe
// the client made, is closed, by putting /dev/null in its place, so that the destructor's own close
// later closes only that. A LibTorch whose client makes no such pipe (2.x) is left as it is.
void stop_callback_thread(const std::set<int>& open_before) {
  std::vector<int> made;  // pipe write ends that the client opened
  for (int fd : open_descriptors())
    if (!open_before.count(fd) && (fcntl(fd, F_GETFL) & O_ACCMODE) == O_WRONLY) made.push_back(fd);
  if (made.size() != 1) return;
  int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (null < 0) return;
  if (dup2(null, made[0]) == made[0]) fcntl(made[0], F_SETFD, FD_CLOEXEC);
  close(null);
}

class TcpKvStore : public ddp::KvStore {
 public:
  explicit TcpKvStore(const ddp::KvStoreOptions& options) {
    c10d::TCPStoreOptions o;
    o.port = static_cast<uint16_t>(options.port);
    o.isServer = options.is_server;
    o.waitWorkers = false;
    o.timeout = options.timeout;
    std::set<int> open_before = open_descriptors();
    store_ = std::make_unique<c10d::TCPStore>(options.host, o);
    if (!options.is_server) stop_callback_thread(open_before);  // the host's own client goes with it
  }
  void set(const std::string& key, const std::string& value) override { store_->set(key, bytes(value)); }
  std::string get(const std::string& key) override { return text(store_->get(key)); }
  bool check(const std::string& key) override { return store_->check({key}); }
  int64_t add(const std::string& key, int64_t amount) override { return store_->add(key, amount); }
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) override {
    return text(store_->compareSet(key, bytes(expected), bytes(desired)));
  }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    store_->wait(keys, timeout);
  }
  int port() const override { return store_->getPort(); }

 private:
  std::unique_ptr<c10d::TCPStore> store_;
};

}  // namespace

extern "C" ddp::KvStore* ddprun_open_tcp_store(const ddp::KvStoreOptions* options, char* error, std::size_t error_size) {
  try {
    return new TcpKvStore(*options);
  } catch (const std::exception& e) {
    std::strncpy(error, e.what(), error_size - 1);
    return nullptr;
  }
}
