#pragma once
// Parameters built without their values, which each rank gives only to those it holds (Note
// [Deferred initialisation]).

#include <ATen/core/Tensor.h>
#include <torch/types.h>

#include <functional>
#include <optional>
#include <unordered_map>
#include <vector>

#include "ddp/model/tensor_part.h"

namespace ddp {

// Note [Deferred initialisation]
// Where a pass keeps part of the model on each rank (dist.shard parameters, pipeline stages, tensor
// parallelism) no rank should hold the whole model, yet every rank must start from the weights a
// whole build draws under the seed (the replicated run's, nanoGPT's). A model's
// constructor therefore fills each parameter through init_parameter(). In a whole build that fills
// it. In a deferred build (a DeferredBuild on this thread) it notes the CPU generator's state and
// the fill, draws the same numbers into the tensor, so that every later draw is a whole build's,
// and frees the tensor's storage: the model keeps every parameter's shape and holds one at a time.
// materialize() later gives a parameter its values by running its fill again from the noted state,
// and each pass calls it, or take_parts(), for what it keeps (Note [Passes]): a stage its own
// layers, the all-reduce what it syncs; a parameter a pass freed gets none. Values that draw nothing
// from the default generator come the same way, through init_parameter_without_draws():
// model.init_from's (a read of the parameter's tensor from the file, in place of its fill), and
// DLRM's tables (rows from generators of their own). A pass that keeps part of a parameter takes
// that part alone (take_parts): the tensor pass its slice, the sharding engine its share of a
// unit's elements. Such a part is made alone where its source can (a file's bytes for it, a table's
// rows); a fill that draws still draws the whole tensor, for a moment, and is cut.
// torchtitan builds on the meta device and initialises each rank's shards; LibTorch 1.13
// has no such device for nn modules, hence the replay. A model moved to a GPU or cast (Model::to)
// before its passes moves its waiting parameters without values (move_waiting): their fills still
// draw on the CPU, in the dtype the build made them, and the values are then converted, which is
// what a whole build moved afterwards holds.
// A parameter filled twice (a layer's default draws, then the family's own initialisation) keeps
// the last fill; the first still draws, as in a whole build.

/// What a deferred build noted for each parameter, and its replay.
class DeferredInit {
 public:
  /// Writes a parameter's values into the tensor it is given (same shape and dtype), drawing from
  /// LibTorch's default CPU generator as nn::init does.
  using Fill = std::function<void(torch::Tensor&)>;

  /// Gives each still-deferred tensor of `tensors` its values (others are left as they are).
  void materialize(const std::vector<torch::Tensor>& tensors);
  /// Gives every deferred tensor its values.
  void materialize_all();
  /// The values of `parts` of `tensor` viewed as `view` (its shape, or [numel] for runs of its
  /// elements), in its dtype, read alone where they come from a file; `tensor` waits no more, and has
  /// no values until the caller gives it some. nullopt for a tensor that does not wait.
  std::optional<std::vector<torch::Tensor>> take_parts(const torch::Tensor& tensor, c10::IntArrayRef view,
                                                       const std::vector<TensorPart>& parts);
  /// Whether `tensor` waits for its values.
  bool deferred(const torch::Tensor& tensor) const;
  /// Moves each waiting tensor to `device` and `dtype` (each given or not), still without values
  /// (Model::to): the values it gets later are drawn as built, then converted to where it now is.
  void move_waiting(std::optional<torch::Device> device, std::optional<torch::Dtype> dtype);
  /// How many tensors wait for their values.
  std::size_t pending() const { return entries_.size(); }

  /// For init_parameter: `tensor` (storage freed) takes `fill` from generator state `state`
  /// (undefined: a fill that draws nothing), or `fill_part` for a part alone where it is given.
  void note(const torch::Tensor& tensor, torch::Tensor state, Fill fill, MakePart fill_part = {});

 private:
  struct Entry {
    torch::Tensor tensor;  // the model's parameter, without storage until materialised
    torch::Tensor state;   // the default CPU generator's state before the fill
    torch::TensorOptions built;  // where and how the fill draws: the CPU, the dtype at the build
    Fill fill;
    MakePart fill_part;
  };
  torch::Tensor whole_values(Entry& entry) const;
  static torch::Tensor placed(const Entry& entry, const torch::Tensor& values);
  std::unordered_map<const c10::TensorImpl*, Entry> entries_;
};

/// While it lives, init_parameter() on this thread defers into `init` (Note [Deferred
/// initialisation]). A build whose fills draw must run inside build_seeded (make_model's, when
/// seeded), which holds the generator for it.
class DeferredBuild {
 public:
  explicit DeferredBuild(DeferredInit& init);
  ~DeferredBuild();
  DeferredBuild(const DeferredBuild&) = delete;
  DeferredBuild& operator=(const DeferredBuild&) = delete;
};

/// Whether this thread builds a model deferred.
bool deferring();

/// Whether `t` has its values: storage for its elements (a deferred parameter has none yet).
bool has_values(const torch::Tensor& t);
/// Frees `t`'s storage and keeps its shape: no values until new storage is given.
void free_storage(const torch::Tensor& t);

/// Fills `parameter` (no gradient recorded): now, or noted for later in a deferred build, where its
/// storage is then freed. A parameter without storage already (filled once before) draws into a
/// scratch tensor.
void init_parameter(const torch::Tensor& parameter, const DeferredInit::Fill& fill);

/// Gives `parameter` the values `fill` writes without drawing from the default generator (a weights
/// file's; rows from a model's own generators): now, or, in a deferred build, when a pass takes it,
/// in place of the fill noted before; `fill_part` (may be null) makes a part of them alone.
void init_parameter_without_draws(const torch::Tensor& parameter, DeferredInit::Fill fill,
                                  MakePart fill_part = {});

/// Fills a Linear's or a Conv's `weight` [out, in, kernel...] and `bias` (undefined: none) through
/// init_parameter, drawing as LinearImpl's and ConvNdImpl's reset_parameters do.
void init_as_layer(const torch::Tensor& weight, const torch::Tensor& bias);

/// Lays `parameter` out in `format` (channels-last conv weights), with its values or, deferred, for
/// them: they are then drawn in logical order, as a whole build draws them, and laid out so.
void set_memory_format(const torch::Tensor& parameter, c10::MemoryFormat format);

/// LibTorch's default CPU generator's state, and setting it: for a layer that let LibTorch draw its
/// parameters and now fills them again through init_parameter() from where those draws began.
torch::Tensor default_generator_state();
void set_default_generator_state(const torch::Tensor& state);

}  // namespace ddp
