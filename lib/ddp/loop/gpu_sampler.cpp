#include "ddp/loop/gpu_sampler.h"

#include <dlfcn.h>

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
  void* library = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!library) return nullptr;
  auto api = std::make_unique<Api>();
  api->library = library;
  auto symbol = [&](const char* name) { return dlsym(library, name); };
  auto init = reinterpret_cast<int (*)()>(symbol("nvmlInit_v2"));
  auto by_index = reinterpret_cast<int (*)(unsigned, Api::Device*)>(symbol("nvmlDeviceGetHandleByIndex_v2"));
  api->shutdown = reinterpret_cast<int (*)()>(symbol("nvmlShutdown"));
  api->utilization = reinterpret_cast<int (*)(Api::Device, Api::Utilization*)>(symbol("nvmlDeviceGetUtilizationRates"));
  api->memory = reinterpret_cast<int (*)(Api::Device, Api::Memory*)>(symbol("nvmlDeviceGetMemoryInfo"));
  api->temperature = reinterpret_cast<int (*)(Api::Device, int, unsigned*)>(symbol("nvmlDeviceGetTemperature"));
  api->power = reinterpret_cast<int (*)(Api::Device, unsigned*)>(symbol("nvmlDeviceGetPowerUsage"));
  bool complete = init && by_index && api->shutdown && api->utilization && api->memory && api->temperature && api->power;
  if (!complete || init() != 0) {
    dlclose(library);
    return nullptr;
  }
  if (by_index(static_cast<unsigned>(index), &api->device) != 0) {
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
  Api::Utilization utilization{};
  Api::Memory memory{};
  unsigned temperature = 0, milliwatts = 0;
  if (api_->utilization(api_->device, &utilization) != 0 || api_->memory(api_->device, &memory) != 0 ||
      api_->temperature(api_->device, 0, &temperature) != 0 || api_->power(api_->device, &milliwatts) != 0)
    return std::nullopt;
  constexpr double kMiB = 1024.0 * 1024.0;
  return GpuSample{static_cast<double>(utilization.gpu), memory.used / kMiB, memory.total / kMiB,
                   static_cast<double>(temperature), milliwatts / 1000.0};
}

}  // namespace ddp
