#include "ddp/loop/host_read_counter.h"

#include <cstring>
#include <utility>

namespace ddp {
namespace {

// Per thread: ranks run as threads of one process each count their own (Note [Ranks as threads]).
thread_local bool t_counting = false;
thread_local int64_t t_reads = 0;

// A copy into host memory from a device's (copy_(self, src, non_blocking): what .to(kCPU) and .cpu()
// come to): it waits for the device as a value read does, unless it goes into pinned memory
// without blocking.
bool copies_to_host(const at::RecordFunction& fn) {
  if (std::strcmp(fn.name(), "aten::copy_") != 0) return false;
  auto inputs = fn.inputs();
  if (inputs.size() < 2 || !inputs[0].isTensor() || !inputs[1].isTensor()) return false;
  const auto &to = inputs[0].toTensor(), &from = inputs[1].toTensor();
  if (!to.is_cpu() || from.is_cpu()) return false;
  const bool non_blocking = inputs.size() >= 3 && inputs[2].isBool() && inputs[2].toBool();
  return !(non_blocking && to.is_pinned());
}

std::unique_ptr<at::ObserverContext> on_op(const at::RecordFunction& fn) {
  if (t_counting && (std::strcmp(fn.name(), "aten::_local_scalar_dense") == 0 || copies_to_host(fn))) ++t_reads;
  return nullptr;
}

}  // namespace

HostReadCounter::~HostReadCounter() {
  t_counting = false;
  if (handle_) at::removeCallback(handle_);
}

void HostReadCounter::step_begins() {
  if (!std::exchange(first_seen_, true)) return;  // the first step sets up: not counted
  if (steps_ >= kSampledSteps) return;
  if (!handle_)  // on the thread that runs the steps
    handle_ = at::addThreadLocalCallback(
        at::RecordFunctionCallback(on_op).needsInputs(true).scopes({at::RecordScope::FUNCTION}));
  t_reads = 0;
  t_counting = true;
}

void HostReadCounter::step_ends() {
  if (!t_counting) return;
  t_counting = false;
  reads_ += t_reads;
  if (++steps_ == kSampledSteps) {
    at::removeCallback(handle_);
    handle_ = 0;
  }
}

double HostReadCounter::per_step() const {
  return steps_ > 0 ? static_cast<double>(reads_) / static_cast<double>(steps_) : 0.0;
}

}  // namespace ddp
