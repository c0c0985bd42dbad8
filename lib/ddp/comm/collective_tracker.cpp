#include "ddp/comm/collective_tracker.h"

#include <mutex>
#include <set>
#include <sstream>

#include "ddp/common/text.h"

namespace ddp {
namespace {

constexpr auto kPublishEvery = std::chrono::milliseconds(200);

std::string key_of(int rank) { return "ddp/collective/" + std::to_string(rank); }

// The trackers of this process (rank threads have one each), for publish_last_words.
std::mutex live_mutex;
std::set<CollectiveTracker*> live;

}  // namespace

CollectiveTracker::CollectiveTracker(c10::intrusive_ptr<c10d::Store> store, int rank, int world_size,
                                     std::vector<int> global_ranks, std::shared_ptr<std::atomic<int64_t>> step)
    : store_(std::move(store)),
      rank_(rank),
      world_size_(world_size),
      global_ranks_(std::move(global_ranks)),
      step_(step ? std::move(step) : std::make_shared<std::atomic<int64_t>>(0)) {
  if (world_size_ <= 1) return;
  publisher_ = std::thread([this] { publish_loop(); });
  std::lock_guard<std::mutex> lock(live_mutex);
  live.insert(this);
}

CollectiveTracker::~CollectiveTracker() {
  {
    std::lock_guard<std::mutex> lock(live_mutex);
    live.erase(this);
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (!publisher_.joinable()) return;
  publisher_.join();
  publish_now();  // the last word, so a rank that waits on us after we exit sees how far we got
}

void CollectiveTracker::publish_now() {
  std::string last = record();
  try {
    store_->set(key_of(rank_), std::vector<uint8_t>(last.begin(), last.end()));
  } catch (const std::exception&) {
  }
}

void CollectiveTracker::publish_last_words() {
  std::lock_guard<std::mutex> lock(live_mutex);
  for (CollectiveTracker* tracker : live) {
    // The publisher sets the store holding this mutex: one client, one request at a time. Stopped
    // first, it writes nothing after the last word.
    std::lock_guard<std::mutex> publishing(tracker->mutex_);
    tracker->stopping_ = true;
    tracker->publish_now();
  }
}

int64_t CollectiveTracker::begin(const char* op) {
  op_.store(op);
  return seq_.fetch_add(1) + 1;
}

std::string CollectiveTracker::record() const {
  return std::to_string(seq_.load()) + " " + op_.load() + " " + std::to_string(step_->load());
}

// Off the hot path: the step never waits for the store.
void CollectiveTracker::publish_loop() {
  std::string published;
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    std::string now = record();
    if (now != published) {
      try {
        store_->set(key_of(rank_), std::vector<uint8_t>(now.begin(), now.end()));
        published = now;
      } catch (const std::exception&) {
        // The store went away (launcher gone); the collective itself will report the failure.
      }
    }
    wake_.wait_for(lock, kPublishEvery);
  }
}

void CollectiveTracker::wait(const c10::intrusive_ptr<c10d::Work>& work, int64_t seq) {
  auto start = std::chrono::steady_clock::now();
  try {
    work->wait();
  } catch (const std::exception& e) {
    std::string cause = e.what();
    cause = cause.substr(0, cause.find('\n'));
    double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::ostringstream message;
    message << op_.load() << " #" << seq << " at step " << step_->load() << " failed on " << rank_name(rank_)
            << " after " << static_cast<int>(waited + 0.5) << " s: ";
    std::vector<int> missing;
    message << diagnose(seq, cause, missing);
    throw CollectiveError(message.str(), std::move(missing));
  }
}

std::string CollectiveTracker::rank_name(int position) const {
  return "rank " + std::to_string(world_rank(position));
}

std::string CollectiveTracker::diagnose(int64_t seq, const std::string& cause, std::vector<int>& missing) {
  if (world_size_ == 1) return cause;
  // Let every rank's latest count reach the store first.
  std::this_thread::sleep_for(3 * kPublishEvery);
  std::string my_op = op_.load();
  std::vector<std::string> behind, different;
  for (int r = 0; r < world_size_; ++r) {
    if (r == rank_) continue;
    std::string text;
    try {
      if (store_->check({key_of(r)})) {
        auto value = store_->get(key_of(r));
        text.assign(value.begin(), value.end());
      }
    } catch (const std::exception&) {
      return cause + " (the store is unreachable, so the other ranks' progress is unknown)";
    }
    // "SEQ OP STEP", where OP may have spaces of its own ("gradient all_reduce").
    const auto first = text.find(' '), last = text.rfind(' ');
    const bool whole = first != std::string::npos && last > first;
    const std::string their_op = whole ? text.substr(first + 1, last - first - 1) : "";
    int64_t their_seq = whole ? parse_int(text.substr(0, first)).value_or(0) : 0;
    // A count is published every kPublishEvery: a rank that stopped (killed, frozen) may have gone
    // further than its last published one, by as many steps as that time held (was: "its last
    // collective is", 47 steps behind).
    std::string where = whole ? "its last published count is " + their_op + " #" + text.substr(0, first) + " at step " +
                                    text.substr(last + 1)
                              : "it started no collective";
    if (their_seq < seq) {
      behind.push_back(rank_name(r) + " (" + where + ")");
      missing.push_back(world_rank(r));
    } else if (their_seq == seq && their_op != my_op)
      different.push_back(rank_name(r) + " (" + where + ")");
  }
  std::string report;
  if (!behind.empty()) {
    report = "never arrived: ";
    for (std::size_t i = 0; i < behind.size(); ++i) report += (i ? ", " : "") + behind[i];
  }
  if (!different.empty()) {
    report += std::string(report.empty() ? "" : "; ") + "called a different collective: ";
    for (std::size_t i = 0; i < different.size(); ++i) report += (i ? ", " : "") + different[i];
    report += " (one rank skipped or added a collective)";
  }
  // Begun, as the counts say: a rank stopped or stuck inside it has not necessarily arrived.
  if (report.empty()) report = "every rank had begun it";
  return report + " [" + cause + "]";
}

}  // namespace ddp
