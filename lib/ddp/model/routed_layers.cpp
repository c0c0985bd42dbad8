#include "ddp/model/routed_layers.h"

#include <torch/nn/functional/linear.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>

#include "ddp/model/deferred_init.h"

namespace ddp {

RoutedLinear::RoutedLinear(int64_t in, int64_t out, bool bias, int64_t fused) : fused_(fused) {
  torch::Tensor before = deferring() ? default_generator_state() : torch::Tensor();
  torch::nn::Linear drawn(torch::nn::LinearOptions(in, out).bias(bias));  // its reset_parameters' draws
  weight = register_parameter("weight", drawn->weight);
  if (bias) this->bias = register_parameter("bias", drawn->bias);
  if (!before.defined()) return;
  // Deferred (Note [Deferred initialisation]): the same draws again, noted to be replayed.
  set_default_generator_state(before);
  init_as_layer(weight, this->bias);
}

RoutedLinear::RoutedLinear(const torch::Tensor& weight, const torch::Tensor& bias)
    : weight(register_parameter("weight", weight)) {
  if (bias.defined()) this->bias = register_parameter("bias", bias);
}

torch::Tensor RoutedLinear::forward(const torch::Tensor& x) const {
  return route_ ? route_(x, weight, bias) : torch::nn::functional::linear(x, weight, bias);
}

RoutedEmbedding::RoutedEmbedding(int64_t rows, int64_t dim) {
  torch::Tensor before = deferring() ? default_generator_state() : torch::Tensor();
  torch::nn::Embedding drawn(rows, dim);
  weight = register_parameter("weight", drawn->weight);
  if (!before.defined()) return;
  set_default_generator_state(before);  // deferred: EmbeddingImpl::reset_parameters' draws again
  init_parameter(weight, [](torch::Tensor& w) { torch::nn::init::normal_(w); });
}

RoutedEmbedding::RoutedEmbedding(const torch::Tensor& weight) : weight(register_parameter("weight", weight)) {}

torch::Tensor RoutedEmbedding::forward(const torch::Tensor& ids) const {
  return route_ ? route_(ids, weight) : torch::embedding(weight, ids);
}

}  // namespace ddp
