#include "ddp/model/rank_random.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <mutex>

namespace ddp {
namespace {

thread_local at::Generator* t_rank_generator = nullptr;
thread_local at::Generator* t_region_generator = nullptr;

std::mutex& build_mutex() {
  static std::mutex mutex;
  return mutex;
}

}  // namespace

at::Generator rank_cpu_generator() {
  return t_rank_generator ? *t_rank_generator : at::detail::getDefaultCPUGenerator();
}

at::Generator cpu_generator() { return t_region_generator ? *t_region_generator : rank_cpu_generator(); }

void set_region_generator(at::Generator* generator) { t_region_generator = generator; }

uint64_t draw_seed() {
  at::Generator generator = cpu_generator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return at::check_generator<at::CPUGeneratorImpl>(generator)->random64();
}

RankGeneratorScope::RankGeneratorScope() : generator_(at::detail::createCPUGenerator()) {
  t_rank_generator = &generator_;
}

RankGeneratorScope::~RankGeneratorScope() { t_rank_generator = nullptr; }

void build_seeded(uint64_t seed, const std::function<void()>& build) {
  std::lock_guard<std::mutex> lock(build_mutex());
  torch::manual_seed(seed);
  build();
  if (!t_rank_generator) return;
  at::Generator global = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> state_lock(global.mutex());
  t_rank_generator->set_state(global.get_state());
}

void with_default_generator_at(const torch::Tensor& state, const std::function<void()>& fill) {
  std::lock_guard<std::mutex> lock(build_mutex());
  // Puts the generator back as it was, whether the fill returns or throws.
  struct Restore {
    at::Generator global = at::detail::getDefaultCPUGenerator();
    torch::Tensor saved;
    ~Restore() {
      std::lock_guard<std::mutex> state_lock(global.mutex());
      global.set_state(saved);
    }
  } restore;
  {
    std::lock_guard<std::mutex> state_lock(restore.global.mutex());
    restore.saved = restore.global.get_state();
    restore.global.set_state(state);
  }
  fill();
}

bool on_rank_thread() { return t_rank_generator != nullptr; }

void drawing_as_rank(const std::function<void()>& body) {
  if (!t_rank_generator) return body();
  std::lock_guard<std::mutex> lock(build_mutex());
  // The rank's state goes in and comes back out, whether `body` returns or throws; the default
  // generator is put back as it was.
  struct Swap {
    at::Generator global = at::detail::getDefaultCPUGenerator();
    at::Generator& rank = *t_rank_generator;
    torch::Tensor saved;
    Swap() {
      std::lock_guard<std::mutex> state_lock(global.mutex());
      saved = global.get_state();
      global.set_state(rank.get_state());
    }
    ~Swap() {
      std::lock_guard<std::mutex> state_lock(global.mutex());
      rank.set_state(global.get_state());
      global.set_state(saved);
    }
  } swap;
  body();
}

torch::Tensor rank_dropout(const torch::Tensor& x, double p, bool training) {
  if (!x.device().is_cpu() || !training || p <= 0 || p >= 1 || x.numel() == 0) return torch::dropout(x, p, training);
  // ATen's CPU path (_dropout_impl): a Bernoulli(1 - p) mask, divided by 1 - p, times the input.
  torch::Tensor noise;
  {
    torch::NoGradGuard no_grad;
    noise = torch::empty_like(x, at::MemoryFormat::Contiguous).bernoulli_(1 - p, cpu_generator());
    noise.div_(1 - p);
  }
  return x * noise;
}

}  // namespace ddp
