#include "ddp/loop/memory_in_use.h"

#include <malloc.h>
#ifdef DDP_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace ddp {

int64_t memory_in_use(const torch::Device& device) {
#ifdef DDP_WITH_CUDA
  if (device.is_cuda()) {
    auto index = device.has_index() ? device.index() : c10::cuda::current_device();
    return c10::cuda::CUDACachingAllocator::getDeviceStats(index).allocated_bytes[0].current;  // 0: all pools
  }
#endif
  (void)device;
  struct mallinfo2 info = mallinfo2();
  return static_cast<int64_t>(info.uordblks + info.hblkhd);
}

int64_t peak_memory_in_use(const torch::Device& device) {
#ifdef DDP_WITH_CUDA
  if (device.is_cuda()) {
    auto index = device.has_index() ? device.index() : c10::cuda::current_device();
    return c10::cuda::CUDACachingAllocator::getDeviceStats(index).allocated_bytes[0].peak;
  }
#endif
  (void)device;
  return -1;
}

}  // namespace ddp
