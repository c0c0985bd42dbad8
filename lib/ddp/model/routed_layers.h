#pragma once
// Linear and Embedding layers whose forward a pass may route (Note [Routed layers]).

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>

namespace ddp {

// Note [Routed layers]: LibTorch's C++ modules have no forward hooks, so a pass that splits a layer
// between ranks (tensor parallelism) cannot wrap its forward from outside. A model builds the layers
// such a pass may split as these instead: they have torch::nn's parameter names, initial values and
// forward until a pass routes them, which then also slices their parameters in place. The model's
// forward does not change: it calls the layer as it would torch::nn's.

/// How a routed Linear computes its output from x and its (possibly sliced) weight and bias.
using LinearRoute =
    std::function<torch::Tensor(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias)>;
/// How a routed Embedding looks ids up in its (possibly sliced) table.
using EmbeddingRoute = std::function<torch::Tensor(const torch::Tensor& ids, const torch::Tensor& weight)>;

/// torch::nn::Linear's parameters (`weight` [out, in], `bias` [out]) and forward.
class RoutedLinear : public torch::nn::Module {
 public:
  /// Initialised as torch::nn::Linear(in, out) is, from the same draws. `fused`: the output is that
  /// many equal projections side by side (attention's q, k and v in one layer), each of which a pass
  /// that splits the outputs must split alike.
  RoutedLinear(int64_t in, int64_t out, bool bias, int64_t fused = 1);
  /// Over existing tensors, registered as its `weight` [out, in] and `bias` [out] (undefined: none):
  /// a head tied to an embedding, a TorchScript module's nn.Linear (Note [Scripted routes]).
  explicit RoutedLinear(const torch::Tensor& weight, const torch::Tensor& bias = {});

  torch::Tensor forward(const torch::Tensor& x) const;
  /// From now on forward calls `route` (null: torch::nn's linear).
  void route(LinearRoute route) { route_ = std::move(route); }
  bool routed() const { return static_cast<bool>(route_); }
  int64_t fused() const { return fused_; }

  torch::Tensor weight, bias;

 private:
  int64_t fused_ = 1;
  LinearRoute route_;
};

/// torch::nn::Embedding's parameter (`weight` [rows, dim]) and forward.
class RoutedEmbedding : public torch::nn::Module {
 public:
  /// Initialised as torch::nn::Embedding(rows, dim) is, from the same draws.
  RoutedEmbedding(int64_t rows, int64_t dim);
  /// Over an existing table, registered as its `weight`.
  explicit RoutedEmbedding(const torch::Tensor& weight);

  torch::Tensor forward(const torch::Tensor& ids) const;
  /// From now on forward calls `route` (null: the plain lookup).
  void route(EmbeddingRoute route) { route_ = std::move(route); }
  bool routed() const { return static_cast<bool>(route_); }

  torch::Tensor weight;

 private:
  EmbeddingRoute route_;
};

}  // namespace ddp
