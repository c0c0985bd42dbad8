#include "ddp/loop/autocast_scope.h"

#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <torch/version.h>

namespace ddp {
namespace {

// LibTorch 2.4 and later take the device type; before, one function per device (deprecated since).
#define DDP_AUTOCAST_BY_DEVICE_TYPE (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4))
bool is_enabled(torch::DeviceType type) {
#if DDP_AUTOCAST_BY_DEVICE_TYPE
  return at::autocast::is_autocast_enabled(type);
#else
  return type == torch::kCUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
#endif
}

void set_enabled(torch::DeviceType type, bool enabled) {
#if DDP_AUTOCAST_BY_DEVICE_TYPE
  at::autocast::set_autocast_enabled(type, enabled);
#else
  type == torch::kCUDA ? at::autocast::set_enabled(enabled) : at::autocast::set_cpu_enabled(enabled);
#endif
}

torch::ScalarType get_dtype(torch::DeviceType type) {
#if DDP_AUTOCAST_BY_DEVICE_TYPE
  return at::autocast::get_autocast_dtype(type);
#else
  return type == torch::kCUDA ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
#endif
}

void set_dtype(torch::DeviceType type, torch::ScalarType dtype) {
#if DDP_AUTOCAST_BY_DEVICE_TYPE
  at::autocast::set_autocast_dtype(type, dtype);
#else
  type == torch::kCUDA ? at::autocast::set_autocast_gpu_dtype(dtype) : at::autocast::set_autocast_cpu_dtype(dtype);
#endif
}

}  // namespace

bool autocast_enabled(torch::Device device) { return is_enabled(device.type()); }

torch::ScalarType autocast_dtype(torch::Device device) { return get_dtype(device.type()); }

AutocastScope::AutocastScope(torch::Device device, bool enabled, torch::ScalarType dtype)
    : type_(device.type()), enabled_(enabled) {
  if (!enabled_) return;
  was_enabled_ = is_enabled(type_);
  was_dtype_ = get_dtype(type_);
  set_dtype(type_, dtype);
  set_enabled(type_, true);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!enabled_) return;
  // The outermost scope drops the casts it cached (weights cast once per forward), as torch.autocast does.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  set_enabled(type_, was_enabled_);
  set_dtype(type_, was_dtype_);
}

void use_tf32(bool on) {
  at::globalContext().setAllowTF32CuBLAS(on);
  at::globalContext().setAllowTF32CuDNN(on);
}

}  // namespace ddp
