#include "ddp/text/parallel_encoder.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>

#include "ddp/common/error.h"

namespace ddp {
namespace {

constexpr std::size_t kChunkBytes = 256 << 10;  // small enough that the last chunks leave no thread idle for long

}  // namespace

std::vector<std::vector<uint32_t>> encode_lines(const TextTokenizer& tokenizer, const std::vector<std::string_view>& lines,
                                                int threads, const std::function<void(int64_t)>& progress) {
  std::vector<std::size_t> starts;  // chunk k is lines [starts[k], starts[k + 1])
  for (std::size_t i = 0, bytes = kChunkBytes; i < lines.size(); ++i) {
    if (bytes >= kChunkBytes) {
      starts.push_back(i);
      bytes = 0;
    }
    bytes += lines[i].size() + 1;
  }
  starts.push_back(lines.size());
  const std::size_t chunks = starts.size() - 1;
  std::vector<std::vector<uint32_t>> ids(chunks);

  std::atomic<std::size_t> next{0};
  std::atomic<int64_t> done_bytes{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex mutex;
  std::condition_variable finished;
  int running = std::max(1, std::min<int>(threads, static_cast<int>(std::max<std::size_t>(chunks, 1))));
  auto work = [&]() {
    try {
      for (std::size_t k; !failed && (k = next++) < chunks;) {
        int64_t bytes = 0;
        auto& out = ids[k];
        for (std::size_t i = starts[k]; i < starts[k + 1]; ++i) {
          out.push_back(static_cast<uint32_t>(tokenizer.line_start_id()));
          for (int id : tokenizer.encode_line(lines[i])) out.push_back(static_cast<uint32_t>(id));
          bytes += static_cast<int64_t>(lines[i].size()) + 1;
        }
        done_bytes += bytes;
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex);
      if (!error) error = std::current_exception();
      failed = true;
    }
    std::lock_guard<std::mutex> lock(mutex);
    if (--running == 0) finished.notify_all();
  };
  std::vector<std::thread> pool;
  const int workers = running;
  for (int t = 0; t < workers; ++t) {
    try {
      pool.emplace_back(work);
    } catch (const std::system_error& e) {  // no thread to be had: the ones running finish the work
      std::lock_guard<std::mutex> lock(mutex);
      running -= workers - t;
      if (pool.empty()) throw UserError(std::string("cannot start a thread to encode on: ") + e.what());
      break;
    }
  }
  {
    std::unique_lock<std::mutex> lock(mutex);
    while (!finished.wait_for(lock, std::chrono::seconds(1), [&] { return running == 0; }))
      if (progress && !failed) {
        lock.unlock();
        try {
          progress(done_bytes);
          lock.lock();
        } catch (...) {  // a stop request: the threads end after their chunk, and it is rethrown
          lock.lock();
          if (!error) error = std::current_exception();
          failed = true;
        }
      }
  }
  for (auto& thread : pool) thread.join();
  if (error) std::rethrow_exception(error);
  if (progress) progress(done_bytes);
  return ids;
}

}  // namespace ddp
