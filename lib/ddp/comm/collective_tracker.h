#pragma once
// Every collective a rank starts gets a sequence number, published to the store in the
// background. When one fails or times out, the rank names the ranks that never arrived.

#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

namespace ddp {

/// A collective that failed or timed out; what() names the operation and the missing ranks.
class CollectiveError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Counts this rank's collectives and lets the others see the count.
class CollectiveTracker {
 public:
  /// Publishes this rank's progress to `store` from a background thread (when world_size > 1).
  CollectiveTracker(c10::intrusive_ptr<c10d::Store> store, int rank, int world_size);
  ~CollectiveTracker();
  CollectiveTracker(const CollectiveTracker&) = delete;
  CollectiveTracker& operator=(const CollectiveTracker&) = delete;

  /// Notes the start of collective `op` (a static string); returns its sequence number.
  int64_t begin(const char* op);

  /// Collectives begun so far on this rank.
  int64_t started() const { return seq_.load(); }

  /// The trainer's step, shown in reports.
  void set_step(int64_t step) { step_.store(step); }

  /// Waits for `work`. A failure becomes a CollectiveError that names, from the published counts,
  /// the ranks that never reached collective `seq` or called a different one.
  void wait(const c10::intrusive_ptr<c10d::Work>& work, int64_t seq);

 private:
  void publish_loop();
  std::string record() const;
  std::string diagnose(int64_t seq, const std::string& cause);

  c10::intrusive_ptr<c10d::Store> store_;
  int rank_;
  int world_size_;
  std::atomic<int64_t> seq_{0};
  std::atomic<const char*> op_{"none"};
  std::atomic<int64_t> step_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread publisher_;
};

}  // namespace ddp
