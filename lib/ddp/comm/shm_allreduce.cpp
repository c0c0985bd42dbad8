#include "ddp/comm/shm_allreduce.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <atomic>
#include <cstring>
#include <ctime>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace ddp {

// Note [Shared-memory all-reduce]
// Every rank owns a slot of one chunk in a segment all ranks map. A tensor is summed a chunk at a
// time, each chunk split into world_size parts; rank r is the one that sums part r:
//   1. rank r copies the parts the others sum (all but part r) into its slot;  barrier
//   2. rank r adds part r of every slot, its own part from its tensor, in rank order (each value
//      divided first, when asked: the gradients' average), and writes the sum into its tensor and
//      into its slot;                                                          barrier
//   3. rank r copies every other part's sum from its owner's slot into its tensor.
// Each element is summed once, by one rank, in rank order: every rank gets the same bits, run
// after run. There are two sets of slots, used by alternate chunks, so step 1 of a chunk cannot
// overwrite a slot another rank is still reading in step 3 of the previous chunk (everyone has
// finished that step before passing the next chunk's first barrier). A chunk's slots fit in the
// shared cache, so steps 1 to 3 mostly move data between caches, not through memory.
// A barrier spins briefly, then sleeps on a futex. Every rank holds a lock on one byte of the
// segment, which the kernel drops when the process dies: a sleeping rank looks at those locks
// every 100 ms, so a rank that exited is named at once instead of after dist.timeout_s.

// Note [Hierarchical all-reduce]
// Across nodes, shared memory within each node and Gloo between one leader per node (local rank 0):
//   1. the node's ranks sum in shared memory, each value divided first (the reduce to the leader;
//      every rank of the node has the node's sum after it, the leader's is the one that counts);
//   2. the leaders sum the node sums over Gloo, which leaves the same bits on each leader;
//   3. the others zero their tensor and the node sums once more, undivided: leader + 0 + 0 ... is
//      the leader's value exactly (a -0 becomes +0, on every rank alike), the broadcast back.
// So every rank of every node holds the same bits, and only one rank per node crosses the network:
// Gloo among all ranks would move local_world_size times the bytes between nodes.

// Note [Shared-memory shards]
// Sharded data parallelism splits a flat tensor of N·S floats into N contiguous shards, rank r
// owning [rS, (r+1)S). The reduce-scatter is the all-reduce's steps 1 and 2 with another map from
// slot to tensor: a round takes the same L floats from every shard (L = a slot's N-th), rank r
// copies the others' into its slot, part q at q·L, and after a barrier sums part r of every slot
// (its own from its tensor), in rank order, into its shard. So each shard gets the bits the
// all-reduce gives there. The all-gather is one copy each way: rank r puts up to a slot of its
// shard in its slot; after a barrier every rank copies every slot out. One barrier per round is
// enough, as rounds alternate the two slot sets: a rank writes a set only after a barrier that
// every rank reached after reading it. These stay within a node: across nodes the shard group is a
// node's ranks (HSDP), or the trainer falls back to Gloo.

namespace {

constexpr int64_t kChunkFloats = 64 * 1024;  // 256 KiB per slot
constexpr int64_t kAlignFloats = 16;         // parts start on a cache line
constexpr std::size_t kHeaderBytes = 4096;
constexpr int kSpinsBeforeSleep = 4096;      // ~20-50 µs of spinning, then a futex sleep
constexpr std::chrono::milliseconds kLivenessCheckEvery{100};  // while asleep in a barrier

int64_t part_begin(int64_t length, int world_size, int part) {
  int64_t per = (length + world_size - 1) / world_size;
  per = (per + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
  return std::min(length, per * part);
}

void copy_floats(float* to, const float* from, int64_t count) {
  if (count > 0) std::memcpy(to, from, static_cast<std::size_t>(count) * sizeof(float));
}

// out[i] = in[0][i]/d + in[1][i]/d + ... in that order, written to both `out` and `publish`; `out`
// may be one of the inputs, since each block is read whole before it is written. A power-of-two d
// is applied as a multiplication by 1/d, which is exact, so equal to the division.
template <bool kPowerOfTwo>
void sum_in_rank_order(const std::vector<const float*>& in, float* out, float* publish, int64_t count, float d) {
  // `publish` may be null: the reduce-scatter keeps its sums.
  constexpr int64_t kBlock = 1024;
  alignas(64) float block[kBlock];
  const float inverse = 1.0f / d;
  auto scaled = [&](float x) { return kPowerOfTwo ? x * inverse : x / d; };
  for (int64_t start = 0; start < count; start += kBlock) {
    int64_t n = std::min(kBlock, count - start);
    const float* first = in[0] + start;
    const float* second = in[1] + start;
    for (int64_t i = 0; i < n; ++i) block[i] = scaled(first[i]) + scaled(second[i]);
    for (std::size_t q = 2; q < in.size(); ++q) {
      const float* next = in[q] + start;
      for (int64_t i = 0; i < n; ++i) block[i] += scaled(next[i]);
    }
    copy_floats(out + start, block, n);
    if (publish) copy_floats(publish + start, block, n);
  }
}

bool is_power_of_two(float d) {
  int exponent = 0;
  return d > 0 && std::frexp(d, &exponent) == 0.5f;
}

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Shared (not FUTEX_PRIVATE) futexes: the word lives in memory several processes map.
void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::nanoseconds limit) {
  timespec timeout{static_cast<time_t>(limit.count() / 1000000000), static_cast<long>(limit.count() % 1000000000)};
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &timeout, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

}  // namespace

// The start of the segment; the tmpfs pages start zeroed, which is the initial state.
struct SharedMemoryAllReduce::Header {
  alignas(64) std::atomic<uint32_t> arrived;     // ranks at the current barrier
  alignas(64) std::atomic<uint32_t> generation;  // barriers passed
  std::atomic<uint32_t> sleepers;                // ranks in futex_wait on `generation`
};
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) && std::atomic<uint32_t>::is_always_lock_free,
              "futexes need plain lock-free 32-bit words");

class SharedMemoryAllReduce::SumWork : public c10d::Work {
 public:
  void complete(std::exception_ptr error) { finish(std::move(error)); }
};

std::unique_ptr<SharedMemoryAllReduce> SharedMemoryAllReduce::connect(c10d::Store& store, int rank, int world_size,
                                                                      std::chrono::milliseconds timeout,
                                                                      std::string& why_not, int first_rank) {
  const std::size_t bytes = kHeaderBytes + 2 * static_cast<std::size_t>(world_size) * kChunkFloats * sizeof(float);
  auto as_string = [](const std::vector<uint8_t>& value) { return std::string(value.begin(), value.end()); };
  auto set = [&](const std::string& key, const std::string& value) {
    store.set(key, std::vector<uint8_t>(value.begin(), value.end()));
  };
  std::optional<SharedSegment> segment;
  std::string error;
  try {
    if (rank == 0) {
      segment = SharedSegment::create(bytes);
      set("shm_allreduce/name", segment->name());
    } else {
      std::string name = as_string(store.get("shm_allreduce/name"));
      if (name.empty()) throw std::runtime_error("rank 0 could not create the segment");
      segment = SharedSegment::open(name, bytes);
    }
    segment->lock_byte(rank);  // held until this process exits: see gone_rank()
  } catch (const std::exception& e) {
    error = e.what();
    if (rank == 0) set("shm_allreduce/name", "");
  }
  set("shm_allreduce/rank_" + std::to_string(rank), error.empty() ? "ok" : error);
  for (int q = 0; q < world_size; ++q) {
    std::string status = as_string(store.get("shm_allreduce/rank_" + std::to_string(q)));
    if (status != "ok" && why_not.empty()) why_not = "rank " + std::to_string(q) + ": " + status;
  }
  if (!why_not.empty()) return nullptr;
  segment->unlink();  // every rank has it mapped
  return std::unique_ptr<SharedMemoryAllReduce>(
      new SharedMemoryAllReduce(std::move(*segment), rank, world_size, timeout, first_rank));
}

SharedMemoryAllReduce::SharedMemoryAllReduce(SharedSegment segment, int rank, int world_size,
                                             std::chrono::milliseconds timeout, int first_rank)
    : segment_(std::move(segment)), rank_(rank), world_size_(world_size), first_rank_(first_rank), timeout_(timeout) {}

SharedMemoryAllReduce::~SharedMemoryAllReduce() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool SharedMemoryAllReduce::supports(const torch::Tensor& tensor) {
  return tensor.device().is_cpu() && tensor.scalar_type() == torch::kFloat && tensor.is_contiguous();
}

SharedMemoryAllReduce::Header& SharedMemoryAllReduce::header() const {
  return *static_cast<Header*>(segment_.data());
}

float* SharedMemoryAllReduce::slot(int64_t set, int rank) const {
  auto* slots = reinterpret_cast<float*>(static_cast<char*>(segment_.data()) + kHeaderBytes);
  return slots + (set * world_size_ + rank) * kChunkFloats;
}

void SharedMemoryAllReduce::barrier() {
  Header& h = header();
  const uint32_t generation = h.generation.load(std::memory_order_acquire);  // before arriving
  if (h.arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<uint32_t>(world_size_)) {
    h.arrived.store(0, std::memory_order_relaxed);  // published by the generation's release
    h.generation.fetch_add(1, std::memory_order_seq_cst);
    if (h.sleepers.load(std::memory_order_seq_cst) > 0) futex_wake_all(&h.generation);
    return;
  }
  for (int i = 0; i < kSpinsBeforeSleep; ++i) {
    if (h.generation.load(std::memory_order_acquire) != generation) return;
    cpu_relax();
  }
  // Either the last rank sees us in `sleepers` and wakes us, or we see its new generation.
  auto deadline = std::chrono::steady_clock::now() + timeout_;
  h.sleepers.fetch_add(1, std::memory_order_seq_cst);
  auto fail = [&](const std::string& why) {
    h.sleepers.fetch_sub(1, std::memory_order_seq_cst);
    throw std::runtime_error("shared-memory all-reduce: " + why);
  };
  while (h.generation.load(std::memory_order_seq_cst) == generation) {
    auto left = deadline - std::chrono::steady_clock::now();
    if (left <= std::chrono::nanoseconds::zero()) {
      std::ostringstream message;
      message << "the other ranks did not arrive within " << timeout_.count() / 1000.0 << " s";
      fail(message.str());
    }
    futex_wait(&h.generation, generation, std::min<std::chrono::nanoseconds>(left, kLivenessCheckEvery));
    // A rank that exited will never arrive; Gloo would see its socket close, so say it as fast.
    if (int gone = gone_rank(); gone >= 0 && h.generation.load(std::memory_order_seq_cst) == generation)
      fail("rank " + std::to_string(first_rank_ + gone) + " exited while the others waited for it");
  }
  h.sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

int SharedMemoryAllReduce::gone_rank() const {
  for (int q = 0; q < world_size_; ++q)
    if (q != rank_ && !segment_.is_locked(q)) return q;
  return -1;
}

void SharedMemoryAllReduce::sum_chunk(float* chunk, int64_t length, float divisor) {
  const int64_t set = chunks_done_++ % 2;
  const int64_t mine = part_begin(length, world_size_, rank_);
  const int64_t mine_end = part_begin(length, world_size_, rank_ + 1);
  float* own_slot = slot(set, rank_);
  copy_floats(own_slot, chunk, mine);
  copy_floats(own_slot + mine_end, chunk + mine_end, length - mine_end);
  barrier();
  std::vector<const float*> in;
  for (int q = 0; q < world_size_; ++q) in.push_back((q == rank_ ? chunk : slot(set, q)) + mine);
  if (is_power_of_two(divisor))
    sum_in_rank_order<true>(in, chunk + mine, own_slot + mine, mine_end - mine, divisor);
  else
    sum_in_rank_order<false>(in, chunk + mine, own_slot + mine, mine_end - mine, divisor);
  barrier();
  for (int q = 0; q < world_size_; ++q) {
    if (q == rank_) continue;
    int64_t begin = part_begin(length, world_size_, q);
    copy_floats(chunk + begin, slot(set, q) + begin, part_begin(length, world_size_, q + 1) - begin);
  }
}

void SharedMemoryAllReduce::span_nodes(std::function<void(const torch::Tensor&)> leaders_sum) {
  spans_nodes_ = true;
  leaders_sum_ = std::move(leaders_sum);
}

void SharedMemoryAllReduce::sum_on_node(const torch::Tensor& tensor, float divisor) {
  if (world_size_ == 1) {
    if (divisor != 1) tensor.div_(divisor);
    return;
  }
  float* data = tensor.data_ptr<float>();
  const int64_t n = tensor.numel();
  for (int64_t start = 0; start < n; start += kChunkFloats) sum_chunk(data + start, std::min(kChunkFloats, n - start), divisor);
}

void SharedMemoryAllReduce::guarded(const std::function<void()>& body) {
  if (!broken_.empty()) throw std::runtime_error(broken_);
  try {
    body();
  } catch (const std::exception& e) {
    broken_ = e.what();
    throw;
  }
}

void SharedMemoryAllReduce::sum(const torch::Tensor& tensor, float divisor) {
  TORCH_CHECK(supports(tensor), "shared-memory all-reduce takes contiguous float32 CPU tensors");
  guarded([&] {
    sum_on_node(tensor, divisor);
    if (!spans_nodes_) return;
    if (leaders_sum_)
      leaders_sum_(tensor);
    else
      tensor.zero_();
    sum_on_node(tensor, 1);  // the leader's value to every rank of the node
  });
}

void SharedMemoryAllReduce::reduce_scatter(const torch::Tensor& full, const torch::Tensor& shard, float divisor) {
  TORCH_CHECK(supports(full) && supports(shard) && full.numel() == shard.numel() * world_size_,
              "shared-memory reduce-scatter takes contiguous float32 CPU tensors of N·S and S floats");
  guarded([&] {
    const int64_t size = shard.numel();
    const float* data = full.data_ptr<float>();
    float* out = shard.data_ptr<float>();
    if (world_size_ == 1) {
      for (int64_t i = 0; i < size; ++i) out[i] = data[i] / divisor;
      return;
    }
    // See Note [Shared-memory shards].
    const int64_t part = kChunkFloats / world_size_ / kAlignFloats * kAlignFloats;
    std::vector<const float*> in(static_cast<std::size_t>(world_size_));
    for (int64_t start = 0; start < size; start += part) {
      const int64_t n = std::min(part, size - start);
      const int64_t set = chunks_done_++ % 2;
      float* own = slot(set, rank_);
      for (int q = 0; q < world_size_; ++q)
        if (q != rank_) copy_floats(own + q * part, data + q * size + start, n);
      barrier();
      for (int q = 0; q < world_size_; ++q)
        in[static_cast<std::size_t>(q)] = q == rank_ ? data + rank_ * size + start : slot(set, q) + rank_ * part;
      if (is_power_of_two(divisor))
        sum_in_rank_order<true>(in, out + start, nullptr, n, divisor);
      else
        sum_in_rank_order<false>(in, out + start, nullptr, n, divisor);
    }
  });
}

void SharedMemoryAllReduce::all_gather(const torch::Tensor& shard, const torch::Tensor& full) {
  TORCH_CHECK(supports(full) && supports(shard) && full.numel() == shard.numel() * world_size_,
              "shared-memory all-gather takes contiguous float32 CPU tensors of S and N·S floats");
  guarded([&] {
    const int64_t size = shard.numel();
    const float* mine = shard.data_ptr<float>();
    float* out = full.data_ptr<float>();
    if (out + rank_ * size != mine) copy_floats(out + rank_ * size, mine, size);
    if (world_size_ == 1) return;
    for (int64_t start = 0; start < size; start += kChunkFloats) {  // See Note [Shared-memory shards].
      const int64_t n = std::min(kChunkFloats, size - start);
      const int64_t set = chunks_done_++ % 2;
      copy_floats(slot(set, rank_), mine + start, n);
      barrier();
      for (int q = 0; q < world_size_; ++q)
        if (q != rank_) copy_floats(out + q * size + start, slot(set, q), n);
    }
  });
}

c10::intrusive_ptr<c10d::Work> SharedMemoryAllReduce::sum_async(torch::Tensor tensor, float divisor) {
  return run_async([this, tensor = std::move(tensor), divisor] { sum(tensor, divisor); });
}

c10::intrusive_ptr<c10d::Work> SharedMemoryAllReduce::run_async(std::function<void()> job) {
  auto work = c10::make_intrusive<SumWork>();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!thread_.joinable()) thread_ = std::thread([this] { serve(); });
    queue_.push_back({std::move(job), work});
  }
  wake_.notify_one();
  return work;
}

void SharedMemoryAllReduce::serve() {
  for (;;) {
    std::unique_lock<std::mutex> lock(mutex_);
    wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (stopping_) {  // only while unwinding does anything wait here
      for (auto& entry : queue_) entry.work->complete(std::make_exception_ptr(std::runtime_error("shut down")));
      queue_.clear();
      return;
    }
    Queued next = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    std::exception_ptr error;
    try {
      next.job();
    } catch (...) {
      error = std::current_exception();
    }
    next.work->complete(error);
  }
}

}  // namespace ddp
