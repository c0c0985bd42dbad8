#pragma once
// GPU utilisation, memory, temperature and power through NVML, for the system monitor. The library
// (libnvidia-ml.so.1, the driver's) is opened at run time: nothing links it, and a machine without
// it simply has no GPU numbers.

#include <functional>
#include <memory>
#include <optional>

namespace ddp {

/// One reading of one GPU; -1 for what the device does not report (power, on some boards).
struct GpuSample {
  double utilization_percent = -1;
  double memory_used_mib = -1;
  double memory_total_mib = -1;
  double temperature_c = -1;
  double power_w = -1;
};

/// Reads one device through NVML.
class GpuSampler {
 public:
  /// The sampler of NVML's device `index`, or null when NVML or the device is missing.
  static std::unique_ptr<GpuSampler> open(int index);

  /// The sampler of CUDA device `cuda_index`, found by its PCI bus id (CUDA and NVML number devices
  /// differently: CUDA_VISIBLE_DEVICES, and CUDA's fastest-first order); null as open().
  static std::unique_ptr<GpuSampler> open_cuda_device(int cuda_index);
  ~GpuSampler();
  GpuSampler(const GpuSampler&) = delete;
  GpuSampler& operator=(const GpuSampler&) = delete;

  /// Now; nullopt if NVML answers neither utilisation nor memory.
  std::optional<GpuSample> sample() const;

 private:
  struct Api;
  static std::unique_ptr<GpuSampler> open_with(const std::function<int(void*, void*)>& find);
  explicit GpuSampler(std::unique_ptr<Api> api);
  std::unique_ptr<Api> api_;
};

}  // namespace ddp
