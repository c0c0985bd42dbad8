#include "ddp/data/batch_prefetcher.h"

#include <chrono>
#include <stdexcept>

namespace ddp {

BatchPrefetcher::BatchPrefetcher(BatchMaker make, const DataConfig& config, const torch::Device& device)
    : make_(std::move(make)), depth_(config.prefetch), staging_(device) {
  for (int64_t i = 0; i < std::max<int64_t>(1, config.workers); ++i) threads_.emplace_back([this] { work(); });
}

BatchPrefetcher::~BatchPrefetcher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  for (auto& thread : threads_) thread.join();
}

void BatchPrefetcher::start(torch::Tensor indices, int64_t batch_size, int64_t first_batch) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++generation_;
    indices_ = std::move(indices);
    batch_size_ = batch_size;
    batches_ = (indices_.size(0) + batch_size - 1) / batch_size;
    next_to_make_ = next_to_hand_out_ = first_batch;
    ready_.clear();
  }
  changed_.notify_all();
}

Batch BatchPrefetcher::next() {
  auto start = std::chrono::steady_clock::now();
  struct AddWait {
    double& total;
    std::chrono::steady_clock::time_point start;
    ~AddWait() { total += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count(); }
  } add_wait{waited_ms_, start};
  std::unique_lock<std::mutex> lock(mutex_);
  if (next_to_hand_out_ >= batches_) throw std::logic_error("BatchPrefetcher: the epoch has no more batches");
  changed_.wait(lock, [&] { return error_ || ready_.count(next_to_hand_out_) > 0; });
  if (error_) std::rethrow_exception(error_);
  StagedBatch staged = std::move(ready_[next_to_hand_out_]);
  ready_.erase(next_to_hand_out_++);
  changed_.notify_all();  // room for one more
  lock.unlock();
  return staging_.hand_over(std::move(staged));
}

void BatchPrefetcher::work() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    changed_.wait(lock, [&] {
      return stopping_ || (next_to_make_ < batches_ && next_to_make_ < next_to_hand_out_ + depth_);
    });
    if (stopping_) return;
    int64_t b = next_to_make_++;
    int64_t generation = generation_;
    auto slice = indices_.slice(0, b * batch_size_, std::min(indices_.size(0), (b + 1) * batch_size_));
    lock.unlock();
    StagedBatch batch;
    std::exception_ptr error;
    try {
      Batch made = make_(slice);
      if (staging_.device().is_cuda()) made = made.pinned();
      batch = staging_.stage(std::move(made));
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    if (error) {
      error_ = error;
      changed_.notify_all();
      continue;
    }
    if (generation == generation_) {
      ready_[b] = std::move(batch);
      changed_.notify_all();
    }
  }
}

}  // namespace ddp
