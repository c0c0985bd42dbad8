#pragma once
// Random draws per rank when the ranks are threads of one process (Note [Ranks as threads]).
// LibTorch's default CPU generator belongs to the process: rank threads drawing from it would
// interleave their draws, differently each run. So each rank thread draws from a generator of its
// own instead, which continues exactly where a process of its own would have left the default one.

#include <ATen/core/Generator.h>
#include <torch/types.h>

#include <functional>

namespace ddp {

/// The CPU generator the calling thread's random draws come from: its rank's own while a
/// RankGeneratorScope lives on this thread, else LibTorch's default.
at::Generator cpu_generator();

/// Megatron's RNG tracker fork: while set, cpu_generator() on this thread is `generator` (a
/// tensor-parallel region's own, seeded apart on each rank of a tensor group: Note [Tensor
/// parallelism]), which must outlive the setting; null: the rank's (or the default) again.
void set_region_generator(at::Generator* generator);

/// The rank's CPU generator, as cpu_generator() is outside a region: its rank thread's own, or
/// LibTorch's default.
at::Generator rank_cpu_generator();

/// 64 random bits from cpu_generator(), under its lock.
uint64_t draw_seed();

/// While it lives, cpu_generator() on this thread is a generator of its own.
class RankGeneratorScope {
 public:
  RankGeneratorScope();
  ~RankGeneratorScope();
  RankGeneratorScope(const RankGeneratorScope&) = delete;
  RankGeneratorScope& operator=(const RankGeneratorScope&) = delete;

 private:
  at::Generator generator_;
};

/// Seeds LibTorch's generators with `seed` (torch::manual_seed) and runs `build`, which draws from
/// the default one (as nn::init does), one thread at a time; a rank thread's generator then takes
/// the state the build left there. Every rank so builds what a process of its own would.
void build_seeded(uint64_t seed, const std::function<void()>& build);

/// Runs `fill` with LibTorch's default CPU generator at `state`, one thread at a time as
/// build_seeded builds, and puts the generator back as it was: a deferred parameter's draws replayed
/// (Note [Deferred initialisation]).
void with_default_generator_at(const torch::Tensor& state, const std::function<void()>& fill);

/// Whether the calling thread is a rank thread, with a generator of its own (RankGeneratorScope).
bool on_rank_thread();

/// Runs `body`, code that draws from LibTorch's default CPU generator itself (a TorchScript
/// module's dropout): on a rank thread, one rank thread at a time with the default generator at
/// its rank's state, which then takes the state `body` leaves, so the draws are those a process of
/// its own would make; elsewhere, as it is.
void drawing_as_rank(const std::function<void()>& body);

/// torch::dropout, drawing from cpu_generator() on the CPU with the same arithmetic (the same
/// masks and bits as LibTorch's CPU dropout); on other devices, torch::dropout.
torch::Tensor rank_dropout(const torch::Tensor& x, double p, bool training);

}  // namespace ddp
