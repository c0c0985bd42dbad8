// libddprun_tcpstore.so: KvStore over c10d's TCPStore. The only launcher code that touches LibTorch.
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstring>

#include "ddp/launch/kv_store.h"

namespace {

std::vector<uint8_t> bytes(const std::string& text) { return {text.begin(), text.end()}; }
std::string text(const std::vector<uint8_t>& data) { return {data.begin(), data.end()}; }

class TcpKvStore : public ddp::KvStore {
 public:
  explicit TcpKvStore(const ddp::KvStoreOptions& options) {
    c10d::TCPStoreOptions o;
    o.port = static_cast<uint16_t>(options.port);
    o.isServer = options.is_server;
    o.waitWorkers = false;
    o.timeout = options.timeout;
    store_ = std::make_unique<c10d::TCPStore>(options.host, o);
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
