#pragma once
// GPU utilisation, memory, temperature and power through NVML, for the system monitor. The library
// (libnvidia-ml.so.1, the driver's) is opened at run time: nothing links it, and a machine without
// it simply has no GPU numbers.

#include <memory>
#include <optional>

namespace ddp {

/// One reading of one GPU.
struct GpuSample {
  double utilization_percent = 0;
  double memory_used_mib = 0;
  double memory_total_mib = 0;
  double temperature_c = 0;
  double power_w = 0;
};

/// Reads one device through NVML.
class GpuSampler {
 public:
  /// The sampler of CUDA device `index` (as NVML numbers them), or null when NVML or the device
  /// is missing.
  static std::unique_ptr<GpuSampler> open(int index);
  ~GpuSampler();
  GpuSampler(const GpuSampler&) = delete;
  GpuSampler& operator=(const GpuSampler&) = delete;

  /// Now; nullopt if NVML fails to answer.
  std::optional<GpuSample> sample() const;

 private:
  struct Api;
  explicit GpuSampler(std::unique_ptr<Api> api);
  std::unique_ptr<Api> api_;
};

}  // namespace ddp
