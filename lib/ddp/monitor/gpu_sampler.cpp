#include "ddp/monitor/gpu_sampler.h"

#include <dlfcn.h>

#include <string>

#ifdef DDP_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace ddp {

// The few NVML entry points we call, declared as nvml.h declares them (the header is not needed).
struct GpuSampler::Api {
  using Device = void*;
  struct Utilization { unsigned gpu, memory; };
  struct Memory { unsigned long long total, free, used; };
  void* library = nullptr;
  Device device = nullptr;
  int (*shutdown)() = nullptr;
  int (*utilization)(Device, Utilization*) = nullptr;
  int (*memory)(Device, Memory*) = nullptr;
  int (*temperature)(Device, int, unsigned*) = nullptr;  // sensor 0: the GPU die
  int (*power)(Device, unsigned*) = nullptr;             // milliwatts
};

std::unique_ptr<GpuSampler> GpuSampler::open(int index) {
  return open_with([index](void* library, void* device) {
    auto by_index = reinterpret_cast<int (*)(unsigned, Api::Device*)>(dlsym(library, "nvmlDeviceGetHandleByIndex_v2"));
    return by_index ? by_index(static_cast<unsigned>(index), static_cast<Api::Device*>(device)) : -1;
  });
}

std::unique_ptr<GpuSampler> GpuSampler::open_cuda_device(int cuda_index) {
#ifdef DDP_WITH_CUDA
  char bus_id[64] = {};
  if (cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, cuda_index) == cudaSuccess) {
    std::string id = bus_id;
    return open_with([id](void* library, void* device) {
      auto by_bus = reinterpret_cast<int (*)(const char*, Api::Device*)>(dlsym(library, "nvmlDeviceGetHandleByPciBusId_v2"));
      return by_bus ? by_bus(id.c_str(), static_cast<Api::Device*>(device)) : -1;
    });
  }
#endif
  return open(cuda_index);
}

std::unique_ptr<GpuSampler> GpuSampler::open_with(const std::function<int(void*, void*)>& find) {
  void* library = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!library) return nullptr;
  auto api = std::make_unique<Api>();
  api->library = library;
  auto symbol = [&](const char* name) { return dlsym(library, name); };
  auto init = reinterpret_cast<int (*)()>(symbol("nvmlInit_v2"));
  api->shutdown = reinterpret_cast<int (*)()>(symbol("nvmlShutdown"));
  api->utilization = reinterpret_cast<int (*)(Api::Device, Api::Utilization*)>(symbol("nvmlDeviceGetUtilizationRates"));
  api->memory = reinterpret_cast<int (*)(Api::Device, Api::Memory*)>(symbol("nvmlDeviceGetMemoryInfo"));
  api->temperature = reinterpret_cast<int (*)(Api::Device, int, unsigned*)>(symbol("nvmlDeviceGetTemperature"));
  api->power = reinterpret_cast<int (*)(Api::Device, unsigned*)>(symbol("nvmlDeviceGetPowerUsage"));
  bool complete = init && api->shutdown && api->utilization && api->memory && api->temperature && api->power;
  if (!complete || init() != 0) {
    dlclose(library);
    return nullptr;
  }
  if (find(library, &api->device) != 0) {
    api->shutdown();
    dlclose(library);
    return nullptr;
  }
  return std::unique_ptr<GpuSampler>(new GpuSampler(std::move(api)));
}

GpuSampler::GpuSampler(std::unique_ptr<Api> api) : api_(std::move(api)) {}

GpuSampler::~GpuSampler() {
  api_->shutdown();
  dlclose(api_->library);
}

std::optional<GpuSample> GpuSampler::sample() const {
  // Each number on its own: a board that reports no power still reports the rest.
  constexpr double kMiB = 1024.0 * 1024.0;
  GpuSample sample;
  Api::Utilization utilization{};
  Api::Memory memory{};
  unsigned temperature = 0, milliwatts = 0;
  if (api_->utilization(api_->device, &utilization) == 0) sample.utilization_percent = utilization.gpu;
  if (api_->memory(api_->device, &memory) == 0) {
    sample.memory_used_mib = memory.used / kMiB;
    sample.memory_total_mib = memory.total / kMiB;
  }
  if (api_->temperature(api_->device, 0, &temperature) == 0) sample.temperature_c = temperature;
  if (api_->power(api_->device, &milliwatts) == 0) sample.power_w = milliwatts / 1000.0;
  if (sample.utilization_percent < 0 && sample.memory_used_mib < 0) return std::nullopt;
  return sample;
}

}  // namespace ddp
