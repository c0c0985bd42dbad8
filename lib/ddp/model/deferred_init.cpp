#include "ddp/model/deferred_init.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <mutex>

#include "ddp/model/rank_random.h"

namespace ddp {
namespace {

thread_local DeferredInit* t_deferred = nullptr;

}  // namespace

bool has_values(const torch::Tensor& t) { return t.numel() == 0 || t.storage().nbytes() > 0; }

void free_storage(const torch::Tensor& t) {
  c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(c10::DataPtr(nullptr, t.device()));
  storage->set_nbytes(0);
}

torch::Tensor default_generator_state() {
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void set_default_generator_state(const torch::Tensor& state) {
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

void init_as_layer(const torch::Tensor& weight, const torch::Tensor& bias) {
  init_parameter(weight, [](torch::Tensor& w) { torch::nn::init::kaiming_uniform_(w, std::sqrt(5.0)); });
  if (!bias.defined()) return;
  const int64_t fan_in = weight.numel() / weight.size(0);  // inputs × receptive field, as nn::init's
  const double bound = 1 / std::sqrt(static_cast<double>(fan_in));
  init_parameter(bias, [bound](torch::Tensor& b) { torch::nn::init::uniform_(b, -bound, bound); });
}

DeferredBuild::DeferredBuild(DeferredInit& init) { t_deferred = &init; }

DeferredBuild::~DeferredBuild() { t_deferred = nullptr; }

bool deferring() { return t_deferred != nullptr; }

void init_parameter(const torch::Tensor& parameter, const DeferredInit::Fill& fill) {
  torch::NoGradGuard no_grad;
  if (!t_deferred) {
    torch::Tensor target = parameter;
    fill(target);
    return;
  }
  torch::Tensor state = default_generator_state();
  // The draws a whole build makes here, into the parameter while it still has storage.
  torch::Tensor scratch = has_values(parameter) ? parameter : torch::empty(parameter.sizes(), parameter.options());
  fill(scratch);
  t_deferred->note(parameter, std::move(state), fill);
}

void set_memory_format(const torch::Tensor& parameter, c10::MemoryFormat format) {
  torch::NoGradGuard no_grad;
  torch::Tensor p = parameter;
  if (has_values(p)) {
    p.set_data(p.contiguous(format));
    return;
  }
  p.set_data(torch::empty(p.sizes(), p.options().memory_format(format)));  // the strides alone:
  free_storage(p);                                                        // still no values
}

void init_parameter_without_draws(const torch::Tensor& parameter, DeferredInit::Fill fill,
                                  MakePart fill_part) {
  if (!t_deferred) {
    torch::NoGradGuard no_grad;
    torch::Tensor target = parameter;
    fill(target);
    return;
  }
  t_deferred->note(parameter, torch::Tensor(), std::move(fill), std::move(fill_part));
}

void DeferredInit::note(const torch::Tensor& tensor, torch::Tensor state, Fill fill, MakePart fill_part) {
  if (tensor.numel() > 0 && has_values(tensor)) free_storage(tensor);
  auto built = tensor.options().device(torch::kCPU).requires_grad(false);
  entries_[tensor.unsafeGetTensorImpl()] = Entry{tensor, std::move(state), built, std::move(fill), std::move(fill_part)};
}

void DeferredInit::move_waiting(std::optional<torch::Device> device, std::optional<torch::Dtype> dtype) {
  torch::NoGradGuard no_grad;
  for (auto& [impl, entry] : entries_) {
    torch::Tensor& t = entry.tensor;
    auto options = t.options().device(device.value_or(t.device())).dtype(dtype.value_or(t.scalar_type())).requires_grad(false);
    if (options.device() == t.device() && options.dtype() == t.dtype()) continue;
    t.set_data(torch::empty_strided(t.sizes(), t.strides(), options));  // the strides alone, as
    free_storage(t);                                                     // set_memory_format's
  }
}

torch::Tensor DeferredInit::placed(const Entry& entry, const torch::Tensor& values) {
  return values.to(entry.tensor.device(), entry.tensor.scalar_type());  // a no-op where the build was
}

torch::Tensor DeferredInit::whole_values(Entry& entry) const {
  torch::Tensor values = torch::empty(entry.tensor.sizes(), entry.built);
  // The default generator is the process's: borrowed as a build borrows it (build_seeded's
  // lock), at the state the fill began from, then given back as it was.
  if (entry.state.defined())
    with_default_generator_at(entry.state, [&] { entry.fill(values); });
  else  // a read, which draws nothing
    entry.fill(values);
  // Drawn in logical order, as a whole build draws them before converting (set_memory_format).
  if (!entry.tensor.is_contiguous()) values = values.contiguous(entry.tensor.suggest_memory_format());
  return placed(entry, values);
}

std::optional<std::vector<torch::Tensor>> DeferredInit::take_parts(const torch::Tensor& tensor, c10::IntArrayRef view,
                                                                   const std::vector<TensorPart>& parts) {
  torch::NoGradGuard no_grad;
  auto found = entries_.find(tensor.unsafeGetTensorImpl());
  if (found == entries_.end()) return std::nullopt;
  Entry& entry = found->second;
  std::vector<torch::Tensor> values;
  bool any = false;  // a part with elements: else nothing is drawn or read
  for (const auto& part : parts)
    any = any || c10::multiply_integers(part.sizes) > 0;
  if (!any || entry.tensor.numel() == 0) {
    for (const auto& part : parts) values.push_back(torch::empty(part.sizes, entry.tensor.options()));
  } else if (entry.fill_part) {
    for (const auto& part : parts) values.push_back(placed(entry, entry.fill_part(view, part)));
  } else {
    torch::Tensor whole = whole_values(entry);
    for (const auto& part : parts) values.push_back(cut_part(whole, view, part));
  }
  entries_.erase(found);
  return values;
}

bool DeferredInit::deferred(const torch::Tensor& tensor) const {
  return entries_.count(tensor.unsafeGetTensorImpl()) > 0;
}

void DeferredInit::materialize(const std::vector<torch::Tensor>& tensors) {
  torch::NoGradGuard no_grad;
  for (const auto& t : tensors) {
    auto found = entries_.find(t.unsafeGetTensorImpl());
    if (found == entries_.end()) continue;
    Entry& entry = found->second;
    if (entry.tensor.numel() == 0) {  // a pass freed it (another stage's layer): no values to give
      entries_.erase(found);
      continue;
    }
    entry.tensor.set_data(whole_values(entry));
    entries_.erase(found);
  }
}

void DeferredInit::materialize_all() {
  std::vector<torch::Tensor> all;
  for (const auto& [impl, entry] : entries_) all.push_back(entry.tensor);
  materialize(all);
}

}  // namespace ddp
