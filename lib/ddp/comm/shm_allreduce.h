#pragma once
// Gradient all-reduce for the ranks of one node through shared memory instead of Gloo's loopback
// TCP: microseconds instead of milliseconds for a bucket, and memory bandwidth for large ones.

#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "ddp/comm/shared_segment.h"

namespace ddp {

/// Sums float32 CPU tensors over the ranks of this node (Note [Shared-memory all-reduce]), and over
/// several nodes through their leaders when asked (Note [Hierarchical all-reduce]).
class SharedMemoryAllReduce {
 public:
  /// Sets the segment up through `store`: rank 0 creates it, the others map it. Returns the same
  /// on every rank: the engine, or nullptr with `why_not` set when some rank could not map it.
  /// `first_rank`: the job's rank of this engine's rank 0 (a node's ranks are numbered in a row),
  /// for messages that name a rank as the job numbers it.
  static std::unique_ptr<SharedMemoryAllReduce> connect(c10d::Store& store, int rank, int world_size,
                                                        std::chrono::milliseconds timeout, std::string& why_not,
                                                        int first_rank = 0);
  ~SharedMemoryAllReduce();
  SharedMemoryAllReduce(const SharedMemoryAllReduce&) = delete;
  SharedMemoryAllReduce& operator=(const SharedMemoryAllReduce&) = delete;

  /// Whether sum() takes `tensor`: float32, on the CPU, contiguous.
  static bool supports(const torch::Tensor& tensor);

  /// Replaces `tensor` by the sum over the ranks of tensor / divisor (each rank's values divided,
  /// then summed in rank order), bit-identical on every rank. Every rank must call it with the
  /// same sizes and divisor in the same order, and not while sum_async() work is pending. Throws
  /// std::runtime_error after the time-out or when another rank has exited.
  void sum(const torch::Tensor& tensor, float divisor = 1);

  /// Makes every sum span several nodes (Note [Hierarchical all-reduce]): this engine then joins the
  /// ranks of one node, and `leaders_sum`, given on each node's local rank 0 only (null elsewhere),
  /// sums a tensor in place over those leaders, the same on each.
  void span_nodes(std::function<void(const torch::Tensor&)> leaders_sum);

  /// sum() on this rank's communication thread, in call order; the Work completes when it is done.
  c10::intrusive_ptr<c10d::Work> sum_async(torch::Tensor tensor, float divisor = 1);

  /// The ranks this engine joins: every rank, or this node's after span_nodes().
  int size() const { return world_size_; }

  /// Whether sum() adds other nodes' sums (span_nodes()); reduce_scatter and all_gather never do.
  bool spans_nodes() const { return spans_nodes_; }

  /// Reduce-scatter among this engine's ranks, never across nodes (Note [Shared-memory shards]):
  /// `shard` (S floats) gets part `rank` of the sum of every rank's `full` (size() × S floats), each
  /// value divided by `divisor` first: the bits sum() gives there. Same calling rules as sum().
  void reduce_scatter(const torch::Tensor& full, const torch::Tensor& shard, float divisor = 1);

  /// All-gather among this engine's ranks: `full` (size() × S floats) gets every rank's `shard`
  /// (S floats) at rank × S. `shard` may be this rank's part of `full`.
  void all_gather(const torch::Tensor& shard, const torch::Tensor& full);

  /// `job` (calls of this engine) on the communication thread, after everything queued before it.
  c10::intrusive_ptr<c10d::Work> run_async(std::function<void()> job);

 private:
  class SumWork;
  struct Header;
  struct Queued {
    std::function<void()> job;
    c10::intrusive_ptr<SumWork> work;
  };

  SharedMemoryAllReduce(SharedSegment segment, int rank, int world_size, std::chrono::milliseconds timeout,
                        int first_rank);
  Header& header() const;
  float* slot(int64_t set, int rank) const;
  void barrier();
  /// A rank whose process has exited (its byte lock on the segment is gone), or -1.
  int gone_rank() const;
  void sum_chunk(float* chunk, int64_t length, float divisor);
  void sum_on_node(const torch::Tensor& tensor, float divisor);
  /// Runs `body`; after a failure every later call fails the same way (the segment's state is unknown).
  void guarded(const std::function<void()>& body);
  void serve();  // the communication thread

  SharedSegment segment_;
  int rank_;
  int world_size_;
  int first_rank_;  // the job's rank of rank_ 0
  std::chrono::milliseconds timeout_;
  int64_t chunks_done_ = 0;  // the same on every rank: picks the slot set
  std::string broken_;       // set after a failure: the segment's state is unknown from then on
  bool spans_nodes_ = false;
  std::function<void(const torch::Tensor&)> leaders_sum_;  // on a node's leader, when spanning nodes

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Queued> queue_;
  bool stopping_ = false;
  std::thread thread_;  // started by the first sum_async
};

}  // namespace ddp
