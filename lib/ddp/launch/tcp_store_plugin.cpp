// libddprun_tcpstore.so: KvStore over c10d's TCPStore. The only launcher code that touches LibTorch.
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "ddp/launch/kv_store.h"

namespace {

std::vector<uint8_t> bytes(const std::string& text) { return {text.begin(), text.end()}; }
std::string text(const std::vector<uint8_t>& data) { return {data.begin(), data.end()}; }

// A descriptor's open file, by identity: numbers are reused, inodes of live files are not.
struct OpenFile {
  int fd;
  dev_t device;
  ino_t inode;
  bool fifo;
  int access;  // O_RDONLY, O_WRONLY or O_RDWR
};

std::vector<OpenFile> open_files() {
  std::vector<OpenFile> files;
  if (DIR* dir = opendir("/proc/self/fd")) {
    while (dirent* entry = readdir(dir)) {
      if (entry->d_name[0] == '.') continue;
      int fd = std::atoi(entry->d_name);
      struct stat st;
      int flags = fcntl(fd, F_GETFL);
      if (fd == dirfd(dir) || fstat(fd, &st) != 0 || flags < 0) continue;
      files.push_back({fd, st.st_dev, st.st_ino, S_ISFIFO(st.st_mode), flags & O_ACCMODE});
    }
    closedir(dir);
  }
  return files;
}

// Note [c10d's callback thread]: LibTorch 1.13's TCPStore client runs a thread for watchKey (which
// ddprun never calls) that polls a second connection to the host, and throws, ending the whole
// launcher, when that connection is reset: as it is when a store host that was stopped goes away
// without having taken the connections that reached it meanwhile (a node taking the store over on
// the host's machine connects to it; test_kv_store.cpp). So the thread is stopped as soon as the
// client is made, the way its destructor stops it: the write end of its control pipe, the one new
// pipe the client made, is closed, by putting /dev/null in its place, so that the destructor's own
// close later closes only that. A LibTorch whose client makes no such pipe (later ones) is left as
// it is, and so is any doubt: two new pipes (another thread's), or none.
void stop_callback_thread(const std::vector<OpenFile>& open_before) {
  auto existed = [&](const OpenFile& f) {
    return std::any_of(open_before.begin(), open_before.end(),
                       [&](const OpenFile& b) { return b.device == f.device && b.inode == f.inode; });
  };
  std::vector<OpenFile> made;  // pipe ends that the client opened
  for (const OpenFile& file : open_files())
    if (file.fifo && !existed(file)) made.push_back(file);
  if (made.size() != 2 || made[0].inode != made[1].inode || made[0].access == made[1].access) return;
  const int write_end = made[0].access == O_WRONLY ? made[0].fd : made[1].fd;
  int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (null < 0) return;
  if (dup2(null, write_end) == write_end) fcntl(write_end, F_SETFD, FD_CLOEXEC);
  close(null);
}

// Runs a store call, turning c10d's exception into a StoreError: kTimedOut when the call failed
// after waiting as long as it may (`waits`), else kFailed.
template <typename F>
auto classified(std::chrono::milliseconds waits, F call) {
  const auto start = std::chrono::steady_clock::now();
  try {
    return call();
  } catch (const std::exception& e) {
    // c10d's socket timeouts end at the timeout; 50 ms spares clock granularity.
    bool timed_out = waits.count() > 0 && std::chrono::steady_clock::now() - start + std::chrono::milliseconds(50) >= waits;
    throw ddp::StoreError(timed_out ? ddp::StoreError::Kind::kTimedOut : ddp::StoreError::Kind::kFailed, e.what());
  }
}

constexpr std::chrono::milliseconds kNoWait{0};

class TcpKvStore : public ddp::KvStore {
 public:
  explicit TcpKvStore(const ddp::KvStoreOptions& options) : timeout_(options.timeout) {
    c10d::TCPStoreOptions o;
    o.port = static_cast<uint16_t>(options.port);
    o.isServer = options.is_server;
    o.waitWorkers = false;
    o.timeout = options.timeout;
    std::vector<OpenFile> open_before = open_files();
    store_ = std::make_unique<c10d::TCPStore>(options.host, o);
    if (!options.is_server) stop_callback_thread(open_before);  // the host's own client goes with it
  }
  void set(const std::string& key, const std::string& value) override {
    classified(kNoWait, [&] { store_->set(key, bytes(value)); });
  }
  std::string get(const std::string& key) override {
    return classified(timeout_, [&] { return text(store_->get(key)); });
  }
  bool check(const std::string& key) override {
    return classified(kNoWait, [&] { return store_->check({key}); });
  }
  int64_t add(const std::string& key, int64_t amount) override {
    return classified(kNoWait, [&] { return store_->add(key, amount); });
  }
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) override {
    return classified(kNoWait, [&] { return text(store_->compareSet(key, bytes(expected), bytes(desired))); });
  }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    classified(timeout, [&] { store_->wait(keys, timeout); });
  }
  int port() const override { return store_->getPort(); }

 private:
  std::chrono::milliseconds timeout_;
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
