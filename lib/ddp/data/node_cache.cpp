#include "ddp/data/node_cache.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <regex>
#include <set>
#include <string>
#include <thread>

#include "ddp/common/atomic_file.h"
#include "ddp/common/error.h"
#include "ddp/common/worker_contract.h"
#include "ddp/common/worker_identity.h"
#include "ddp/data/cache_seal.h"
#include "ddp/data/checksum64.h"

namespace ddp {
namespace {

namespace fs = std::filesystem;

// A node's cache is the node's: what goes wrong with it is said by the node's first worker
// (LOCAL_RANK 0, or a process on its own), once per process (rank threads share one), not once a rank.
void warn_for_node(const std::string& message) {
  const char* local_rank = process_variable(env::kLocalRank);
  if (local_rank && std::string(local_rank) != "0") return;
  static std::mutex mutex;
  static std::set<std::string> said;
  std::lock_guard<std::mutex> lock(mutex);
  if (said.insert(message).second) spdlog::warn("{}", message);
}

// XXH64 of the file's content: all of it up to 32 MiB, else 512 blocks of 64 KiB spread over it
// (the first and the last among them). A rewrite that kept the size and the timestamps (cp -p,
// rsync -t, touch -r) changes it, except, in a larger file, an edit wholly between the blocks.
uint64_t content_hash(const std::string& path, off_t size) {
  constexpr off_t kBlock = 64 << 10, kBlocks = 512;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  Checksum64 sum;
  std::string chunk(static_cast<std::size_t>(kBlock), '\0');
  auto add = [&](off_t at, off_t length) {
    ssize_t got = pread(fd, chunk.data(), static_cast<std::size_t>(length), at);
    if (got > 0) sum.update(chunk.data(), static_cast<std::size_t>(got));
  };
  if (size <= kBlock * kBlocks) {
    for (off_t at = 0; at < size; at += kBlock) add(at, std::min(kBlock, size - at));
  } else {
    const off_t last = size - kBlock;
    for (off_t i = 0; i < kBlocks; ++i) add(i == kBlocks - 1 ? last : last / (kBlocks - 1) * i, kBlock);
  }
  close(fd);
  return sum.digest();
}

// The record of a verified cache file: what changes whenever the file does (Note [Verified once
// per node]). "" when it cannot be stat'ed.
std::string verified_stamp(const std::string& path) {
  struct stat info {};
  if (stat(path.c_str(), &info) != 0) return "";
  return "dev " + std::to_string(info.st_dev) + " inode " + std::to_string(info.st_ino) + " size " +
         std::to_string(info.st_size) + " mtime " + std::to_string(info.st_mtim.tv_sec) + "." +
         std::to_string(info.st_mtim.tv_nsec) + " ctime " + std::to_string(info.st_ctim.tv_sec) + "." +
         std::to_string(info.st_ctim.tv_nsec) + "\n";
}

bool is_verified(const std::string& path) {
  std::string stamp = verified_stamp(path);
  if (stamp.empty()) return false;
  try {
    return read_whole_file(path + ".verified") == stamp;
  } catch (const std::exception&) {
    return false;
  }
}

// Best effort: without the record, the next open verifies the file again.
void mark_verified(const std::string& path) {
  try {
    write_file_atomically(path + ".verified", verified_stamp(path), 0644);
  } catch (const std::exception& e) {
    spdlog::debug("cannot record that {} was verified: {}", path, e.what());
  }
}

// Reads every region of the cache file `path` against its checksum; throws CacheRejected.
void verify_cache_file(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw CacheRejected(std::string("cannot open it (") + std::strerror(errno) + ")");
  try {
    verify_cache_regions(fd, read_cache_seal(fd));
  } catch (...) {
    close(fd);
    throw;
  }
  close(fd);
}

// open_cache(), with a file that must not be used counted as not opened and `why` saying why.
bool try_open(const std::function<bool()>& open_cache, std::string& why) {
  try {
    return open_cache();
  } catch (const CacheRejected& e) {
    why = e.what();
    return false;
  }
}

}  // namespace

std::string source_identity(const std::vector<std::string>& sources) {
  std::string identity;
  for (const auto& path : sources) {
    struct stat info {};
    if (path.empty() || stat(path.c_str(), &info) != 0) return "";
    identity += (identity.empty() ? "" : "; ") + fs::absolute(path).string() + " (" + std::to_string(info.st_size) +
                " bytes, mtime " + std::to_string(info.st_mtim.tv_sec) + "." + std::to_string(info.st_mtim.tv_nsec) + ")";
  }
  return identity;
}

std::string resolve_cache_dir(const std::string& configured) {
  if (!configured.empty()) return configured;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/ddprun";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/ddprun";
  return "";
}

std::string cache_file_name(const std::string& stem, const std::vector<std::string>& sources, const std::string& extension) {
  std::string identity;
  for (const auto& path : sources) {
    struct stat info {};
    if (path.empty() || stat(path.c_str(), &info) != 0) return "";
    identity += fs::absolute(path).string() + ":" + std::to_string(info.st_ino) + ":" + std::to_string(info.st_size) +
                ":" + std::to_string(info.st_mtim.tv_sec) + "." + std::to_string(info.st_mtim.tv_nsec) + ":" +
                std::to_string(content_hash(path, info.st_size)) + ";";
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016zx", std::hash<std::string>{}(identity));
  return stem + "-" + hex + "." + extension;
}

mode_t cache_file_mode(const std::string& source) {
  struct stat info {};
  if (source.empty() || stat(source.c_str(), &info) != 0) return 0600;
  return (info.st_mode & 0444) | S_IWUSR;
}

namespace {

// A build stopped part-way (a SIGKILL, a stop before the trainer's handlers) leaves its temporary
// (write_file_atomically's PATH.tmp.XXXXXX), up to the cache's size. Called under the lock, when
// no other builder of this cache runs; a temporary written in the last minute is left all the
// same, for a filesystem whose locks do not reach other nodes (NFS without locking): a live
// build writes its file without pause.
void remove_dead_builds(const std::string& path) {
  const fs::path cache(path);
  const std::string prefix = cache.filename().string() + ".tmp.";
  const auto a_minute_ago = fs::file_time_type::clock::now() - std::chrono::minutes(1);
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(cache.parent_path(), ec)) {
    std::error_code stat_error;
    if (entry.path().filename().string().rfind(prefix, 0) == 0 &&
        fs::last_write_time(entry.path(), stat_error) < a_minute_ago && !stat_error)
      fs::remove(entry.path(), stat_error);
  }
}

// Note [Caches of earlier versions]: a cache's name hashes its sources' inode, size, mtime and
// content, so one built from an earlier version of its sources (a CSV edited, a graph made again)
// is never opened again, yet it stayed: 632 MB per edit of a Criteo log. A build, and each later
// use of what it built, removes the caches whose seals name the same source paths (so one that a
// run still used at the build goes with the next run after it), unless one is in use: each process that uses a
// cache holds a shared lock on its FILE.inuse until it exits, and only a cache whose FILE.inuse
// can be taken at once, exclusively, goes. (A run that has it open reads on, as a removed file
// stays for those that hold it; on NFS that is true of its own node only, hence the lock.)
void hold_in_use(const std::string& path) {
  static std::mutex mutex;
  static std::set<std::string> held;  // for the process's life: its lock goes with its exit
  std::lock_guard<std::mutex> lock(mutex);
  if (held.count(path)) return;
  // Read-write: NFS emulates flock with fcntl locks, whose exclusive kind needs a file open for
  // writing. A shared lock needs reading alone: a cache directory this process cannot write (another
  // user's) is held through the FILE.inuse its builder made, and read unheld only without one.
  int fd = open((path + ".inuse").c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0 && (errno == EACCES || errno == EROFS)) fd = open((path + ".inuse").c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return;
  // Never waits long: a sweep holds its lock a moment; a lock manager that does not answer (NFS)
  // must not hang the data's load.
  for (int tries = 0; flock(fd, LOCK_SH | LOCK_NB) != 0; ++tries) {
    if (errno != EWOULDBLOCK || tries == 20) {
      close(fd);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  held.insert(path);
}

// The source paths a seal names, without their sizes and times: the same for every version.
std::string source_paths(const std::string& sealed_sources) {
  static const std::regex version(R"( \([0-9]+ bytes, mtime [0-9]+\.[0-9]+\))");
  return std::regex_replace(sealed_sources, version, "");
}

// The sources the seal of the cache file `path` names; "" when it has no seal to read.
std::string sealed_sources(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return "";
  std::string sources;
  try {
    struct stat info {};
    if (fstat(fd, &info) == 0 && S_ISREG(info.st_mode)) sources = read_cache_seal(fd).sources;
  } catch (const std::exception&) {  // another format, cut short: not known to be a version of ours
  }
  close(fd);
  return sources;
}

// Under the lock of `path`, just built (Note [Caches of earlier versions]).
void remove_earlier_versions(const std::string& path) {
  const fs::path cache(path);
  const std::string ours = source_paths(sealed_sources(path));
  if (ours.empty()) return;
  static const std::regex cache_name(R"(.+-[0-9a-f]{16}\..+)");
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(cache.parent_path(), ec)) {
    const fs::path other = entry.path();
    if (other == cache || other.extension() != cache.extension() ||
        !std::regex_match(other.filename().string(), cache_name) || source_paths(sealed_sources(other)) != ours)
      continue;
    // No FILE.inuse: no process has used it since this version of ddprun. One that cannot be
    // opened or taken: perhaps in use.
    int in_use = open((other.string() + ".inuse").c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (in_use < 0 && errno != ENOENT) continue;
    if (in_use >= 0 && flock(in_use, LOCK_EX | LOCK_NB) != 0) {
      close(in_use);
      continue;
    }
    std::error_code ignored;
    const bool removed = fs::remove(other, ignored);
    for (const char* beside : {".verified", ".lock", ".inuse"}) fs::remove(other.string() + beside, ignored);
    if (in_use >= 0) close(in_use);
    if (removed) spdlog::info("removed {}, the dataset cache of an earlier version of its sources", other.string());
  }
}

// Best effort: the cache it follows is there either way.
void sweep_earlier_versions(const std::string& path) {
  try {
    remove_earlier_versions(path);
  } catch (const std::exception& e) {
    spdlog::debug("no sweep of earlier caches beside {}: {}", path, e.what());
  }
}

}  // namespace

bool open_or_build_cache(const std::string& path, const std::function<bool()>& open_cache,
                         const std::function<void(const std::string& path, mode_t mode)>& build, mode_t mode,
                         const std::string& what) {
  std::string why;
  hold_in_use(path);  // before it is opened: a build elsewhere does not remove it now
  if (try_open(open_cache, why) && is_verified(path)) {
    sweep_earlier_versions(path);  // one a run still used when this was built is free now
    return true;
  }
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  hold_in_use(path);  // when the directory is new
  int lock = open((path + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (lock < 0) {
    warn_for_node(fmt::format("data.cache_dir {} is not writable ({}); reading {} into memory",
                              fs::path(path).parent_path().string(), std::strerror(errno), what));
    return false;
  }
  // One worker of the node verifies or builds; the others wait here and then open its result.
  if (flock(lock, LOCK_EX) == 0) remove_dead_builds(path);
  why.clear();
  bool opened = false;
  try {
    opened = try_open(open_cache, why);
    if (opened && !is_verified(path)) {
      try {
        verify_cache_file(path);
        mark_verified(path);
      } catch (const CacheRejected& e) {
        opened = false;
        why = e.what();
      }
    }
    if (!opened) {
      if (!why.empty()) spdlog::warn("the dataset cache {} is not used: {}; rebuilding it from {}", path, why, what);
      build(path, mode);
      mark_verified(path);  // its checksums were taken from the bytes it was built from
      sweep_earlier_versions(path);
      why.clear();
      opened = try_open(open_cache, why);
      if (!opened) spdlog::warn("the dataset cache {} just written cannot be opened ({}); reading {} into memory", path,
                                why.empty() ? "it is missing" : why, what);
    }
  } catch (const IoError& e) {  // the cache cannot be written; a broken source (FileError) goes on up
    warn_for_node(fmt::format("cannot write the dataset cache ({}); reading {} into memory", e.what(), what));
  } catch (const FileError&) {
    // A broken source builds no cache; its lock and in-use files would stay for good, as no fixed
    // version of the source has this name (Note [Caches of earlier versions]).
    std::error_code ignored;
    if (!fs::exists(path, ignored))
      for (const char* beside : {".lock", ".inuse", ".verified"}) fs::remove(path + beside, ignored);
    flock(lock, LOCK_UN);
    close(lock);
    throw;
  } catch (...) {
    flock(lock, LOCK_UN);
    close(lock);
    throw;
  }
  flock(lock, LOCK_UN);
  close(lock);
  return opened;
}

}  // namespace ddp
