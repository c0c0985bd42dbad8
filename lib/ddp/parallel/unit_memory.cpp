#include "ddp/parallel/unit_memory.h"

#include <sys/mman.h>

#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include "ddp/model/deferred_init.h"

namespace ddp {

// Note [Unit memory]
// Stage 3 gathers every unit twice a step and frees it twice, and both stages make and drop each
// unit's whole gradients: blocks of tens to hundreds of MiB. From glibc's heap (the trainer serves
// blocks up to 32 MiB there: Note [Malloc churn]) the freed blocks stay mapped and fragment, and a
// run's RSS grew to twice what it held. Mapped straight from the kernel, a freed block goes back
// at once; the blocks freed last, up to the bytes the owner asks to keep, are kept for the next
// gathers, so a steady step faults fewer pages in and never holds more than it uses.

struct UnitMemory::Pool {
  std::mutex mutex;
  std::size_t keep_bytes = 0, kept_bytes = 0;
  std::vector<std::pair<void*, std::size_t>> kept;

  void* take(std::size_t bytes, bool& fresh) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      for (auto it = kept.begin(); it != kept.end(); ++it) {
        if (it->second != bytes) continue;
        void* block = it->first;
        kept.erase(it);
        kept_bytes -= bytes;
        fresh = false;
        return block;
      }
    }
    void* block = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (block == MAP_FAILED) throw std::bad_alloc();  // run_main says "out of memory"
    fresh = true;  // the kernel's pages are zero
    return block;
  }

  void give_back(void* block, std::size_t bytes, bool keep) {
    if (keep) {
      std::lock_guard<std::mutex> lock(mutex);
      if (kept_bytes + bytes <= keep_bytes) {
        kept.emplace_back(block, bytes);
        kept_bytes += bytes;
        return;
      }
    }
    ::munmap(block, bytes);
  }

  ~Pool() {
    for (auto& [block, bytes] : kept) ::munmap(block, bytes);
  }
};

namespace {

// What a block's DataPtr carries to its deleter.
struct Block {
  std::shared_ptr<UnitMemory::Pool> pool;
  void* data;
  std::size_t bytes;
  bool keep;  // kept for reuse when freed, or given back to the kernel
};

void give_back(void* context) {
  auto* block = static_cast<Block*>(context);
  block->pool->give_back(block->data, block->bytes, block->keep);
  delete block;
}

}  // namespace

UnitMemory::UnitMemory(std::size_t keep_bytes) : pool_(std::make_shared<Pool>()) { pool_->keep_bytes = keep_bytes; }

UnitMemory::~UnitMemory() = default;

void UnitMemory::fill_storage(const torch::Tensor& t, bool keep) {
  c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
  const auto bytes = static_cast<std::size_t>(t.numel()) * t.element_size();
  if (!t.device().is_cpu() || bytes == 0) {
    storage->set_data_ptr_noswap(storage->allocator()->allocate(bytes));
  } else {
    bool fresh = false;
    void* data = pool_->take(bytes, fresh);
    storage->set_data_ptr_noswap(c10::DataPtr(data, new Block{pool_, data, bytes, keep}, &give_back, t.device()));
  }
  storage->set_nbytes(bytes);
}

void UnitMemory::empty_storage(const torch::Tensor& t) { free_storage(t); }

torch::Tensor UnitMemory::zeros(int64_t numel, const torch::TensorOptions& options, bool keep) {
  const auto bytes = static_cast<std::size_t>(numel) * c10::elementSize(c10::typeMetaToScalarType(options.dtype()));
  if (options.device().is_cpu() && bytes > 0) {
    bool fresh = false;
    void* data = pool_->take(bytes, fresh);
    if (!fresh) std::memset(data, 0, bytes);
    auto* block = new Block{pool_, data, bytes, keep};
    return torch::from_blob(data, {numel}, [block](void*) { give_back(block); }, options);
  }
  return torch::zeros({numel}, options);
}

}  // namespace ddp
