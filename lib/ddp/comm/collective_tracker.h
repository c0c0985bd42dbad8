#pragma once
// Every collective a rank starts gets a sequence number, published to the store in the
// background. When one fails or times out, the rank names the ranks that never arrived.

#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace ddp {

/// A collective that failed or timed out; what() names the operation and the missing ranks.
class CollectiveError : public std::runtime_error {
 public:
  explicit CollectiveError(const std::string& what, std::vector<int> missing = {})
      : std::runtime_error(what), missing_(std::move(missing)) {}
  /// The world ranks that never arrived at it, as far as their counts in the store tell.
  const std::vector<int>& missing() const { return missing_; }

 private:
  std::vector<int> missing_;
};

/// Counts this rank's collectives and lets the others see the count.
class CollectiveTracker {
 public:
  /// Publishes this rank's progress to `store` from a background thread (when world_size > 1).
  /// A sub-group's tracker names its members by `global_ranks` (the world rank at each position;
  /// empty: the positions are world ranks) and reports `step`, the world tracker's step_counter().
  CollectiveTracker(c10::intrusive_ptr<c10d::Store> store, int rank, int world_size, std::vector<int> global_ranks = {},
                    std::shared_ptr<std::atomic<int64_t>> step = nullptr);
  ~CollectiveTracker();
  CollectiveTracker(const CollectiveTracker&) = delete;
  CollectiveTracker& operator=(const CollectiveTracker&) = delete;

  /// Notes the start of collective `op` (a static string); returns its sequence number.
  int64_t begin(const char* op);

  /// Collectives begun so far on this rank.
  int64_t started() const { return seq_.load(); }

  /// The trainer's step, shown in reports.
  void set_step(int64_t step) { step_->store(step); }
  /// The world rank at group position `position`.
  int world_rank(int position) const {
    return global_ranks_.empty() ? position : global_ranks_[static_cast<std::size_t>(position)];
  }
  /// The step, for a sub-group's tracker to share: the trainer sets it on the world's alone.
  std::shared_ptr<std::atomic<int64_t>> step_counter() const { return step_; }

  /// Waits for `work`. A failure becomes a CollectiveError that names, from the published counts,
  /// the ranks that never reached collective `seq` or called a different one.
  void wait(const c10::intrusive_ptr<c10d::Work>& work, int64_t seq);

  /// Publishes every live tracker's count now: a rank that fails leaves with _Exit, past the
  /// destructors that would, and its peers must not read a count up to 200 ms old.
  static void publish_last_words();

 private:
  void publish_now();
  void publish_loop();
  std::string record() const;
  std::string diagnose(int64_t seq, const std::string& cause, std::vector<int>& missing);
  /// "rank N" for group position `position`, N its world rank: what a user finds in the logs.
  std::string rank_name(int position) const;

  c10::intrusive_ptr<c10d::Store> store_;
  int rank_;
  int world_size_;
  std::atomic<int64_t> seq_{0};
  std::atomic<const char*> op_{"none"};
  std::vector<int> global_ranks_;
  std::shared_ptr<std::atomic<int64_t>> step_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread publisher_;
};

}  // namespace ddp
