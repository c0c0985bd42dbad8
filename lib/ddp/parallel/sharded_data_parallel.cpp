#include "ddp/parallel/sharded_data_parallel.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <set>
#include <utility>

#include "ddp/comm/collectives.h"
#include "ddp/parallel/optimizer_state.h"

namespace ddp {

// Note [Flat shards]
// The parameters are grouped in units. A unit's parameters are laid end to end in one flat tensor
// (each parameter becomes a view of it), zero-padded to N·S elements for a shard group of N ranks;
// rank r owns [rS, (r+1)S). What rank r keeps between steps:
//   - gradients (stage 2 and 3): its S of the averaged gradient. The whole gradients of a unit are
//     the parameters' own .grad, as autograd makes them, until its backward is over; then they are
//     moved, one by one, into one flat tensor, which lives until the unit's reduce-scatter has
//     finished (Note [Gradient memory]);
//   - optimizer state: the optimizer steps this rank's pieces, one 1-D view per parameter that
//     overlaps [rS, (r+1)S), so each element's moments live on one rank only. Updates are
//     element-wise, so a piece's update is the whole tensor's there;
//   - parameters (stage 3 only): its S. Stage 2 keeps every rank's whole flat tensor, which the
//     shards refresh by an all-gather after each optimizer step.
// Reduce-scatters launch in reverse unit order (backward's), strictly in that order on every rank
// (as Note [Bucket order] in gradient_reducer.cpp), each divided by the data-parallel size. Over
// shared memory each shard gets the very bits the replicated all-reduce gives there (Note
// [Shared-memory shards]), so a sharded run matches a replicated one up to clipping, whose global
// norm is summed from the shards in another order. With a data-replicate group (HSDP) the shards
// are then summed across it. Parameters no rank used get no gradient, so the optimizer skips them
// (Note [Unused parameters]); their flags, and the side values, are summed over the world in one
// small all-reduce per step.

// Note [Unit hooks]
// Stage 3 gathers a unit's parameters just before it runs and frees them after, in forward and
// again in backward. ShardedBlocks, the runner of the model's blocks (Note [Blocks]), calls
// before_root() as the forward starts, and before_unit() and after_unit() around each unit's block;
// unit 0, the root, holds the parameters of no unit
// or of several (a tied embedding), and stays gathered from the start of forward until its
// gradients are reduce-scattered. after_unit() frees the unit and puts a hook on its output, which
// backward reaches just before the unit's own backward: the hook gathers it again; forward
// prefetches the unit after. A unit's backward is over once every gradient accumulator of it has
// fired (each fires once, after every use): its parameters are freed then (as its reduce-scatter
// launches, or at once on an accumulation micro-step), and the unit before it is prefetched.
// Freeing keeps the flat tensor's StorageImpl and drops its memory, so the parameters, and the
// tensors autograd saved of them, see the memory a later gather puts back; the gather writes
// through the flat tensor, not through the parameters, whose version counters therefore stay as
// autograd saved them (FSDP's storage resize). Every rank runs the same graph, so the gathers,
// launched from forward and from backward hooks, interleave with the reduce-scatters in the same
// order on every rank, which the collectives need.

// Note [Gradient memory]
// What a rank holds above its shards during backward is what bounds dist.shard parameters: the
// unit being differentiated (gathered) and its new gradient, and nothing more; a 37M-parameter MLP
// at world 4 peaked at 0.74x the replicated run's RSS when a backward held four units' worth. So
// the unit's flat gradient is made only once its backward is over and its gathered parameters are
// freed; each .grad is freed as soon as it is copied in (rather than accumulated into a flat tensor
// made beforehand, which held a unit's gradient twice); the unit before is prefetched only then
// (FSDP's BACKWARD_POST; before its backward, the two units and a gradient were held at once); and
// a unit's backward starts only once the reduce-scatter before it has finished (a second flat
// gradient in flight). The values are the same bits: a gradient copied into zeros is the gradient
// accumulated into zeros. The price is overlap: a backward's communication runs between its units'
// compute; dist.shard_overlap gathers the unit before during a unit's backward and lets a unit's
// reduce-scatter run during the next one's (FSDP's BACKWARD_PRE), holding about two more units.
// The gradient shards, too, hold memory only from their unit's reduce-scatter to the optimizer's
// step (as set_to_none does, but keeping the StorageImpl the pieces' gradients view): while the
// largest unit is differentiated, only the shards of the units after it exist.

namespace {

constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();

int64_t bytes_of(const torch::Tensor& t) { return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0; }

}  // namespace

ShardedDataParallel::ShardedDataParallel(std::vector<torch::Tensor> parameters,
                                         std::vector<std::vector<std::size_t>> units, const Communicator& shard_group,
                                         const Communicator& replicate_group, const Communicator& world,
                                         ShardedOptions options, ValueSlots* side_values)
    : parameters_(std::move(parameters)), unit_of_(parameters_.size(), kNone), shard_group_(shard_group),
      replicate_group_(replicate_group), world_(world), options_(options), side_values_(side_values) {
  const int n = shard_group_.world_size, r = shard_group_.rank;
  torch::NoGradGuard no_grad;
  std::set<const c10::TensorImpl*> distinct;  // one tensor twice would be taken once, then copied unwritten
  for (const auto& p : parameters_)
    TORCH_CHECK(distinct.insert(p.unsafeGetTensorImpl()).second, "ShardedDataParallel: a parameter is given twice");
  for (auto& ids : units) {
    Unit unit;
    int64_t numel = 0;
    for (std::size_t i : ids) {
      TORCH_CHECK(i < parameters_.size() && unit_of_[i] == kNone, "ShardedDataParallel: parameter ", i,
                  " is in no unit or in two");
      TORCH_CHECK(parameters_[i].scalar_type() == parameters_[ids.front()].scalar_type(),
                  "ShardedDataParallel: a unit's parameters must share a dtype");
      unit_of_[i] = units_.size();
      unit.offsets.push_back(numel);
      numel += parameters_[i].numel();
    }
    unit.parameters = std::move(ids);
    unit.shard_numel = (numel + n - 1) / n;
    // Values for what was built without them (Note [Deferred initialisation]), a unit at a time: no
    // rank holds the whole model. Under stage 3 a rank keeps only its share of the unit's elements,
    // and takes only that; the rest of the flat copy is never written (pages the allocator maps
    // afresh, as it does for large blocks, never become resident).
    DeferredInit* const deferred = options_.deferred;
    if (deferred && !options_.shard_parameters) {
      std::vector<torch::Tensor> whole;
      for (std::size_t i : unit.parameters) whole.push_back(parameters_[i]);
      deferred->materialize(whole);
    }
    auto tensor_options = unit.parameters.empty() ? torch::TensorOptions(torch::kFloat)
                                                  : parameters_[unit.parameters.front()].options();
    tensor_options = tensor_options.requires_grad(false);
    unit.full = torch::empty({n * unit.shard_numel}, tensor_options);
    unit.full.narrow(0, numel, n * unit.shard_numel - numel).zero_();  // the padding
    const int64_t share_begin = r * unit.shard_numel, share_end = share_begin + unit.shard_numel;
    for (std::size_t k = 0; k < unit.parameters.size(); ++k) {
      torch::Tensor& p = parameters_[unit.parameters[k]];
      auto place = unit.full.narrow(0, unit.offsets[k], p.numel());
      const int64_t begin = std::max(unit.offsets[k], share_begin);
      const int64_t count = std::max<int64_t>(0, std::min(unit.offsets[k] + p.numel(), share_end) - begin);
      auto taken = deferred && options_.shard_parameters
                       ? deferred->take_parts(p, {p.numel()}, {TensorPart{{begin - unit.offsets[k]}, {count}}})
                       : std::nullopt;
      if (taken)
        unit.full.narrow(0, begin, count).copy_(taken->front());
      else
        place.copy_(p.detach().reshape(-1));
      p.set_data(place.view(p.sizes()));
    }
    auto mine = unit.full.narrow(0, r * unit.shard_numel, unit.shard_numel);
    unit.shard = options_.shard_parameters ? mine.clone() : mine;
    unit.grad_shard = torch::empty({unit.shard_numel}, tensor_options);
    for (std::size_t k = 0; k < unit.parameters.size(); ++k) {
      const int64_t begin = std::max(unit.offsets[k], r * unit.shard_numel);
      const int64_t end = std::min(unit.offsets[k] + parameters_[unit.parameters[k]].numel(), (r + 1) * unit.shard_numel);
      if (begin >= end) continue;
      const int64_t at = begin - r * unit.shard_numel;
      pieces_.push_back(unit.shard.narrow(0, at, end - begin));
      piece_grads_.push_back(unit.grad_shard.narrow(0, at, end - begin));
      pieces_.back().mutable_grad() = piece_grads_.back();
      piece_parameter_.push_back(unit.parameters[k]);
      piece_offset_.push_back(begin - unit.offsets[k]);
      piece_at_.push_back(at);
    }
    UnitMemory::empty_storage(unit.grad_shard);  // its views made: memory from its reduce-scatter on (Note [Gradient memory])
    units_.push_back(std::move(unit));
    // Now, not after the last unit: the model's own storage is freed unit by unit as its flat
    // copies are made, so a rank holds the whole model once, not twice, while this runs.
    if (options_.shard_parameters) release(units_.size() - 1);
  }
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    TORCH_CHECK(unit_of_[i] != kNone, "ShardedDataParallel: parameter ", i, " is in no unit");
    auto accumulator = torch::autograd::impl::grad_accumulator(parameters_[i]);
    if (!accumulator) continue;  // needs no gradient
    units_[unit_of_[i]].gradients += 1;
    accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, i](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          on_gradient_ready(i);
          return outputs;
        }));
    grad_accumulators_.push_back(std::move(accumulator));
  }
  used_.assign(parameters_.size(), 0);
  // Blocks of the largest unit's size kept for reuse: one passes from the gathered unit to its flat
  // gradient; keeping more would hold it idle beside a unit's gradient (Note [Gradient memory]), but
  // with overlap two gathered units and a gradient come and go at once.
  memory_ = std::make_unique<UnitMemory>(static_cast<std::size_t>((options_.overlap ? 3 : 1) * largest_unit_bytes()));
}

ShardedDataParallel::~ShardedDataParallel() = default;

std::vector<int64_t> ShardedDataParallel::piece_dims() const {
  std::vector<int64_t> dims;
  for (std::size_t p : piece_parameter_) dims.push_back(parameters_[p].dim());
  return dims;
}

void ShardedDataParallel::prepare() {
  armed_ = true;
  launched_ = 0;
  for (std::size_t u = 0; u < units_.size(); ++u) arm_backward(u);
  if (side_values_) side_sent_ = side_values_->packed();
}

void ShardedDataParallel::arm_backward(std::size_t unit) { units_[unit].pending = units_[unit].gradients; }

void ShardedDataParallel::on_gradient_ready(std::size_t parameter) {
  used_[parameter] = 1;
  const std::size_t u = unit_of_[parameter];
  Unit& unit = units_[u];
  if (unit.pending == 0 || --unit.pending > 0) return;
  if (armed_) {
    launch_ready(false);
  } else {
    release(u);  // an accumulation micro-step: its backward is over, nothing to send yet
    if (!options_.overlap && u > 1) prefetch(u - 1);
  }
}

void ShardedDataParallel::launch_ready(bool all) {
  while (launched_ < units_.size()) {
    const std::size_t u = units_.size() - 1 - launched_;
    if (!all && units_[u].pending > 0) return;
    if (launched_ == 0) first_launch_ = Clock::now();
    release(u);        // its backward is over: the gathered parameters go before the flat gradient comes
    finish_reduces();  // one flat gradient in flight at a time (Note [Gradient memory])
    reduce(units_[u]);
    ++launched_;
    if (!all && !options_.overlap && u > 1) prefetch(u - 1);  // its backward is next (FSDP's BACKWARD_POST)
  }
}

void ShardedDataParallel::finish_reduces() {
  const auto start = Clock::now();
  for (std::size_t done = 0; done < launched_; ++done) {
    Unit& unit = units_[units_.size() - 1 - done];
    if (!unit.grad_full.defined()) continue;
    unit.reducing.wait();
    release_gradients(unit);
  }
  // Waited inside backward: exposed, as the wait after it is (finish()).
  backward_wait_ms_ += std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

void ShardedDataParallel::reduce(Unit& unit) {
  if (unit.parameters.empty()) return;
  torch::NoGradGuard no_grad;
  // Zeros where a parameter has no gradient. Without overlap, not kept once reduced: it is freed as
  // the next unit's backward starts, which would hold it idle beside that unit's gradient.
  const bool keep = !options_.shard_parameters || options_.overlap;
  unit.grad_full = memory_->zeros(unit.full.numel(), unit.full.options(), keep);
  for (std::size_t k = 0; k < unit.parameters.size(); ++k) {
    torch::Tensor& p = parameters_[unit.parameters[k]];
    if (!p.grad().defined()) continue;
    const torch::Tensor grad = p.grad().is_sparse() ? p.grad().to_dense() : p.grad();  // nn.Embedding(sparse=True)
    unit.grad_full.narrow(0, unit.offsets[k], p.numel()).copy_(grad.reshape(-1));
    p.mutable_grad().reset();  // at once: a unit's gradient is held twice only one parameter at a time
  }
  // Mapped from the kernel and given back: from the heap, a step's freed shards fragmented it.
  if (unit.grad_shard.storage().nbytes() == 0) memory_->fill_storage(unit.grad_shard, /*keep=*/false);  // all written
  unit.reducing = reduce_scatter(shard_group_, unit.grad_full, unit.grad_shard, options_.data_parallel_size);
}

void ShardedDataParallel::finish() {
  auto backward_done = Clock::now();
  const double waited_in_backward = std::exchange(backward_wait_ms_, 0.0);
  launch_ready(/*all=*/true);
  armed_ = false;
  for (std::size_t u = units_.size(); u-- > 0;) {  // in launch order
    units_[u].reducing.wait();
    release_gradients(units_[u]);
  }
  auto done = Clock::now();
  timing_.total_ms = std::chrono::duration<double, std::milli>(done - first_launch_).count();
  timing_.exposed_ms = std::chrono::duration<double, std::milli>(done - std::max(backward_done, first_launch_)).count() +
                       waited_in_backward;
  if (replicate_group_.world_size > 1) {  // HSDP: each shard's sum over the replicas
    std::vector<torch::Tensor> shards;
    for (auto& unit : units_) shards.push_back(unit.grad_shard);
    std::vector<torch::Tensor> flat{torch::cat(shards)};
    int64_t seq = replicate_group_.tracker->begin("gradient all_reduce");
    replicate_group_.tracker->wait(replicate_group_.group->allreduce(flat), seq);
    int64_t offset = 0;
    for (auto& shard : shards) {
      shard.copy_(flat[0].narrow(0, offset, shard.numel()));
      offset += shard.numel();
    }
  }
  // The side values and the use flags (Note [Unused parameters] in gradient_reducer.cpp), summed.
  std::vector<double> values = side_sent_;
  values.insert(values.end(), used_.begin(), used_.end());
  auto sums = torch::tensor(values, torch::kDouble);
  if (world_.world_size > 1) sums = all_reduce_sum(world_, sums);
  const double* sum = sums.data_ptr<double>();
  if (side_values_) std::copy(sum, sum + side_sent_.size(), side_values_->packed().begin());
  const double* used = sum + side_sent_.size();
  for (std::size_t j = 0; j < pieces_.size(); ++j) {
    if (used[piece_parameter_[j]] < 0.5)
      pieces_[j].mutable_grad().reset();  // no rank used it: the optimizer must skip it
    else if (!pieces_[j].grad().defined())
      pieces_[j].mutable_grad() = piece_grads_[j];
  }
}

void ShardedDataParallel::release_gradients(Unit& unit) {
  if (!unit.grad_full.defined()) return;
  unit.grad_full = torch::Tensor();
  for (std::size_t i : unit.parameters) parameters_[i].mutable_grad().reset();
}

void ShardedDataParallel::zero_grad() {
  torch::NoGradGuard no_grad;
  for (auto& unit : units_) {
    UnitMemory::empty_storage(unit.grad_shard);  // its views, the pieces' gradients, stay (Note [Gradient memory])
    unit.grad_full = torch::Tensor();
  }
  for (auto& p : parameters_) p.mutable_grad().reset();
  std::fill(used_.begin(), used_.end(), 0);
}

void ShardedDataParallel::after_optimizer_step() {
  // The values changed through the flat tensors, not through the parameters: their version
  // counters say so, for whatever caches on them (GraphSAGE's full-neighbourhood layers). No
  // autograd graph is alive now to object.
  for (const auto& p : parameters_) torch::autograd::impl::bump_version(p);
  if (options_.shard_parameters) return;  // the next forward gathers them
  for (auto& unit : units_)
    if (!unit.parameters.empty()) unit.gathering = all_gather(shard_group_, unit.shard, unit.full);
  for (auto& unit : units_) unit.gathering.wait();
}

void ShardedDataParallel::prefetch(std::size_t u) {
  if (!options_.shard_parameters || u >= units_.size()) return;
  Unit& unit = units_[u];
  if (unit.gathered || unit.gathering.pending()) return;
  memory_->fill_storage(unit.full);
  unit.gathering = all_gather(shard_group_, unit.shard, unit.full);
}

void ShardedDataParallel::gather(std::size_t u) {
  Unit& unit = units_[u];
  if (!options_.shard_parameters || unit.gathered) return;
  prefetch(u);
  unit.gathering.wait();
  unit.gathered = true;
}

void ShardedDataParallel::release(std::size_t u) {
  Unit& unit = units_[u];
  if (!options_.shard_parameters || unit.parameters.empty() || held_) return;
  unit.gathering.wait();  // a prefetch nobody used: the collective must still complete everywhere
  if (unit.full.storage().nbytes() > 0) UnitMemory::empty_storage(unit.full);
  unit.gathered = false;
}

void ShardedDataParallel::before_root() {
  if (!options_.shard_parameters) return;
  gather(0);
  if (torch::GradMode::is_enabled()) arm_backward(0);
  prefetch(1);
}

void ShardedDataParallel::before_unit(std::size_t unit) {
  if (!options_.shard_parameters) return;
  gather(unit + 1);
  prefetch(unit + 2);
  if (torch::GradMode::is_enabled()) arm_backward(unit + 1);
}

torch::Tensor ShardedDataParallel::after_unit(std::size_t unit, torch::Tensor output) {
  if (!options_.shard_parameters) return output;
  const std::size_t u = unit + 1;
  if (torch::GradMode::is_enabled() && output.requires_grad()) {
    output.register_hook([this, u](const torch::Tensor&) {
      if (armed_ && !options_.overlap) finish_reduces();  // Note [Gradient memory]
      gather(u);  // its backward is next (Note [Unit hooks])
      if (options_.overlap && u > 1) prefetch(u - 1);  // FSDP's BACKWARD_PRE
    });
  }
  release(u);
  return output;
}

std::vector<OwnedRange> ShardedDataParallel::owned_ranges() const {
  std::vector<OwnedRange> ranges;
  for (std::size_t j = 0; j < pieces_.size(); ++j) ranges.push_back({piece_parameter_[j], piece_offset_[j], pieces_[j], pieces_[j], {}});
  return ranges;
}

void ShardedDataParallel::take_part_in_gather() {
  for (std::size_t u = 0; u < units_.size(); ++u) {
    gather(u);
    release(u);
  }
}

void ShardedDataParallel::gather_parameters() {
  for (std::size_t u = 0; u < units_.size(); ++u) prefetch(u);
  for (std::size_t u = 0; u < units_.size(); ++u) gather(u);
  held_ = options_.shard_parameters;  // forwards (evaluation) must not free them meanwhile
}

void ShardedDataParallel::release_parameters() {
  held_ = false;
  for (std::size_t u = 0; u < units_.size(); ++u) release(u);
}

int64_t ShardedDataParallel::parameter_bytes() const {
  int64_t bytes = 0;
  for (const auto& unit : units_) {
    if (options_.shard_parameters) bytes += bytes_of(unit.shard);
    if (!options_.shard_parameters || unit.full.storage().nbytes() > 0) bytes += bytes_of(unit.full);
  }
  return bytes;
}

int64_t ShardedDataParallel::gradient_bytes() const {
  int64_t bytes = 0;
  for (const auto& unit : units_) bytes += bytes_of(unit.grad_shard) + bytes_of(unit.grad_full);
  return bytes;
}

int64_t ShardedDataParallel::largest_unit_bytes() const {
  int64_t bytes = 0;
  for (const auto& unit : units_) bytes = std::max(bytes, bytes_of(unit.full));
  return bytes;
}

}  // namespace ddp
